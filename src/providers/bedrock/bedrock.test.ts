import { createHash } from 'node:crypto';
import { EventStreamCodec } from '@smithy/core/event-streams';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockBedrock, startMockBedrock } from '../../../bench/mock-upstream/bedrock.ts';
import type { AdapterEvent } from '../types.ts';
import { authenticate, parseCredentials, regionOf, requestHeaders } from './api.ts';
import { createByteStreamDecoder, usageEvent } from './response.ts';

const SECRET = 'unitSecret/abcdefghijklmnopqrstuvwxyz0123';
let mock: MockBedrock;

beforeAll(async () => {
  mock = await startMockBedrock({ region: 'sa-east-1', keys: { AKIAUNIT: SECRET } });
});
afterAll(() => mock?.close());

async function post(body: object, secret: string, tamper?: (h: Record<string, string>, payload: Buffer) => Buffer) {
  const url = new URL(`${mock.url}/model/${encodeURIComponent('anthropic.claude-v1:0')}/converse-stream`);
  let payload: Buffer = Buffer.from(JSON.stringify(body));
  const headers = await authenticate(url, requestHeaders(null, payload.length), payload, `AKIAUNIT:${secret}`, 'sa-east-1', 'x/y');
  if (tamper) payload = tamper(headers, payload);
  headers['content-length'] = String(payload.length);
  const res = await fetch(url, { method: 'POST', headers, body: new Uint8Array(payload) });
  return { status: res.status, type: res.headers.get('x-amzn-errortype')?.split(':')[0], body: Buffer.from(await res.arrayBuffer()) };
}

const body = { messages: [{ role: 'user', content: [{ text: 'hi' }] }], inferenceConfig: { maxTokens: 2 } };

describe('SigV4 as the mock Bedrock verifies it', () => {
  it('a request signed with the right secret is served; a wrong secret, a changed body or a changed date is refused', async () => {
    expect((await post(body, SECRET)).status).toBe(200);
    expect(await post(body, 'wrong-secret').then((r) => [r.status, r.type])).toEqual([403, 'InvalidSignatureException']);
    // the body changed after signing, its hash header recomputed to match: the signature no longer does
    const changed = await post(body, SECRET, (h, p) => {
      const other = Buffer.from(p.toString().replace('hi', 'yo'));
      h['x-amz-content-sha256'] = createHash('sha256').update(other).digest('hex');
      return other;
    });
    expect([changed.status, changed.type]).toEqual([403, 'InvalidSignatureException']);
    const stale = await post(body, SECRET, (h, p) => {
      h['x-amz-date'] = h['x-amz-date']!.replace(/T\d{2}/, (t) => `T${String((Number(t.slice(1)) + 1) % 24).padStart(2, '0')}`);
      return p;
    });
    expect([stale.status, stale.type]).toEqual([403, 'InvalidSignatureException']);
  });
});

describe('credentials and region', () => {
  it('ACCESS_KEY:SECRET[:TOKEN] signs; anything without a colon is a Bedrock API key', () => {
    expect(parseCredentials('AK:SE')).toEqual({ kind: 'sigv4', accessKeyId: 'AK', secretAccessKey: 'SE' });
    expect(parseCredentials('AK:SE:TO')).toEqual({ kind: 'sigv4', accessKeyId: 'AK', secretAccessKey: 'SE', sessionToken: 'TO' });
    expect(parseCredentials('ABSKabc')).toEqual({ kind: 'api-key', apiKey: 'ABSKabc' });
    expect(regionOf('https://bedrock-runtime.sa-east-1.amazonaws.com')).toBe('sa-east-1');
    expect(regionOf('https://vpce-1.bedrock-runtime.example.internal?region=us-east-1')).toBe('us-east-1');
    expect(regionOf('https://example.com')).toBeUndefined();
  });
});

describe('ConverseStream decoding', () => {
  const codec = new EventStreamCodec(toUtf8, fromUtf8);
  const frame = (type: string, kind: 'event' | 'exception', payload: object) =>
    codec.encode({
      headers: { ':message-type': { type: 'string', value: kind }, [kind === 'event' ? ':event-type' : ':exception-type']: { type: 'string', value: type } },
      body: fromUtf8(JSON.stringify(payload)),
    });

  it('frames split at any byte give the same events; usage counts cache reads and writes as prompt', () => {
    const all = Buffer.concat([
      frame('messageStart', 'event', { role: 'assistant' }),
      frame('contentBlockDelta', 'event', { contentBlockIndex: 0, delta: { text: 'Olá' } }),
      frame('contentBlockDelta', 'event', { contentBlockIndex: 0, delta: { text: ' mundo' } }),
      frame('messageStop', 'event', { stopReason: 'end_turn' }),
      frame('metadata', 'event', { usage: { inputTokens: 7, outputTokens: 2, cacheReadInputTokens: 5, cacheWriteInputTokens: 3 } }),
    ]);
    for (let cut = 1; cut < all.length; cut += 7) {
      const d = createByteStreamDecoder(null);
      const out: AdapterEvent[] = [];
      d.push(all.subarray(0, cut), out);
      d.push(all.subarray(cut), out);
      d.end(out);
      expect(out).toEqual([
        { type: 'delta', content: 'Olá' },
        { type: 'delta', content: ' mundo' },
        { type: 'finish', reason: 'stop' },
        { type: 'usage', prompt_tokens: 15, completion_tokens: 2, cached_tokens: 5, cache_write_tokens: 3 },
      ]);
    }
    expect(usageEvent({ inputTokens: 4, outputTokens: 1 })).toEqual({ type: 'usage', prompt_tokens: 4, completion_tokens: 1 });
  });

  it('an exception frame fails the call (throttling → 429); a frame cut at the end is an interrupted stream', () => {
    const d = createByteStreamDecoder(null);
    expect(() => d.push(Buffer.from(frame('throttlingException', 'exception', { message: 'slow down' })), [])).toThrow(
      expect.objectContaining({ status: 429, code: 'upstream_rate_limited' }),
    );
    const cut = createByteStreamDecoder(null);
    cut.push(Buffer.from(frame('messageStart', 'event', {})).subarray(0, 10), []);
    expect(() => cut.end([])).toThrow(expect.objectContaining({ code: 'upstream_stream_interrupted' }));
  });
});
