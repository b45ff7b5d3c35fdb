import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCall } from '../../../test/helpers/worker.ts';
import { estimateTokens } from '../shared/estimate.ts';
import type { AdapterEvent } from '../types.ts';
import { createAnthropicAdapter, withReasoningTokens } from './index.ts';
import { completionEvents, createStreamDecoder, mergeDeltaUsage } from './response.ts';

// Usage as Anthropic sends it: message_start's Message.usage has the cache_creation lifetime split,
// message_delta's MessageDeltaUsage has cumulative counts without it (anthropic-sdk-typescript,
// src/resources/messages/messages.ts); thinking is billed inside output_tokens.

function decode(events: unknown[]): AdapterEvent[] {
  const d = createStreamDecoder(null);
  const out: AdapterEvent[] = [];
  for (const e of events) d.data(JSON.stringify(e), out);
  return out;
}
const start = (usage: Record<string, unknown>) => ({ type: 'message_start', message: { usage: { output_tokens: 1, ...usage } } });
const delta = (usage: Record<string, unknown>) => ({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage });
const STOP = { type: 'message_stop' };

describe('cache writes by lifetime when message_delta repeats the input counts', () => {
  it('a one-hour write stays a one-hour write: message_delta (no split) keeps message_start’s split', () => {
    const out = decode([
      start({
        input_tokens: 7,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 92,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 92 },
      }),
      delta({ input_tokens: 7, cache_creation_input_tokens: 92, cache_read_input_tokens: 0, output_tokens: 5 }),
      STOP,
    ]);
    expect(out.at(-1)).toEqual({ type: 'usage', prompt_tokens: 99, cache_write_1h_tokens: 92, completion_tokens: 5 });
  });

  it('both lifetimes in one request keep their counts', () => {
    const out = decode([
      start({ input_tokens: 3, cache_creation_input_tokens: 50, cache_creation: { ephemeral_5m_input_tokens: 20, ephemeral_1h_input_tokens: 30 } }),
      delta({ input_tokens: 3, cache_creation_input_tokens: 50, cache_read_input_tokens: 0, output_tokens: 4 }),
      STOP,
    ]);
    expect(out.at(-1)).toEqual({ type: 'usage', prompt_tokens: 53, cache_write_tokens: 20, cache_write_1h_tokens: 30, completion_tokens: 4 });
  });

  it('a delta with a split of its own is taken as it is', () => {
    const s = { input_tokens: 1, cache_creation_input_tokens: 10, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 10 } };
    expect(
      mergeDeltaUsage(s, { cache_creation_input_tokens: 12, cache_creation: { ephemeral_5m_input_tokens: 4, ephemeral_1h_input_tokens: 8 } }),
    ).toMatchObject({
      input_tokens: 1,
      cache_creation_input_tokens: 12,
      cache_creation: { ephemeral_5m_input_tokens: 4, ephemeral_1h_input_tokens: 8 },
    });
  });

  it('a total that differs from message_start’s split: more goes to 1 h only when every write was 1 h, else to 5 min; less comes out of 5 min first', () => {
    const split = (w5m: number, w1h: number) => ({
      cache_creation_input_tokens: w5m + w1h,
      cache_creation: { ephemeral_5m_input_tokens: w5m, ephemeral_1h_input_tokens: w1h },
    });
    const splitAfter = (s: ReturnType<typeof split>, total: number) => mergeDeltaUsage(s, { cache_creation_input_tokens: total }).cache_creation;
    expect(splitAfter(split(0, 10), 15)).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 15 });
    expect(splitAfter(split(4, 10), 15)).toEqual({ ephemeral_5m_input_tokens: 5, ephemeral_1h_input_tokens: 10 });
    expect(splitAfter(split(0, 0), 6)).toEqual({ ephemeral_5m_input_tokens: 6, ephemeral_1h_input_tokens: 0 });
    expect(splitAfter(split(4, 10), 12)).toEqual({ ephemeral_5m_input_tokens: 2, ephemeral_1h_input_tokens: 10 });
    expect(splitAfter(split(4, 10), 8)).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 8 });
    expect(splitAfter(split(0, 10), 3)).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 3 });
    // message_start without a split: the delta's writes are 5-minute writes, as an unsplit write always is
    expect(
      decode([start({ input_tokens: 2, cache_creation_input_tokens: 5 }), delta({ cache_creation_input_tokens: 9, output_tokens: 1 }), STOP]).at(-1),
    ).toEqual({
      type: 'usage',
      prompt_tokens: 11,
      cache_write_tokens: 9,
      completion_tokens: 1,
    });
  });

  it('a delta without input counts changes nothing but the output', () => {
    const out = decode([
      start({ input_tokens: 7, cache_creation_input_tokens: 92, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 92 } }),
      delta({ output_tokens: 5 }),
      STOP,
    ]);
    expect(out.at(-1)).toEqual({ type: 'usage', prompt_tokens: 99, cache_write_1h_tokens: 92, completion_tokens: 5 });
  });
});

describe('reasoning tokens', () => {
  it('the vendor’s output_tokens_details.thinking_tokens (newer API versions) when it sends them, at most output_tokens', () => {
    expect(decode([start({ input_tokens: 2 }), delta({ output_tokens: 40, output_tokens_details: { thinking_tokens: 25 } }), STOP]).at(-1)).toEqual({
      type: 'usage',
      prompt_tokens: 2,
      completion_tokens: 40,
      reasoning_tokens: 25,
    });
    expect(decode([start({ input_tokens: 2 }), delta({ output_tokens: 10, output_tokens_details: { thinking_tokens: 25 } }), STOP]).at(-1)).toMatchObject({
      reasoning_tokens: 10,
    });
    const out: AdapterEvent[] = [];
    completionEvents(
      { content: [], stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 9, output_tokens_details: { thinking_tokens: 4 } } },
      out,
      null,
    );
    expect(out.at(-1)).toEqual({ type: 'usage', prompt_tokens: 1, completion_tokens: 9, reasoning_tokens: 4 });
  });

  it('otherwise the tokenizer’s count of the thinking text, at most output_tokens; a vendor count or no thinking is left alone', async () => {
    const usage = { type: 'usage' as const, prompt_tokens: 5, completion_tokens: 19 };
    const n = await estimateTokens('Let me think');
    expect(n).toBe(3);
    expect(await withReasoningTokens(usage, 'Let me think')).toEqual({ ...usage, reasoning_tokens: 3 });
    expect(await withReasoningTokens({ ...usage, completion_tokens: 2 }, 'Let me think')).toMatchObject({ reasoning_tokens: 2 });
    expect(await withReasoningTokens({ ...usage, reasoning_tokens: 7 }, 'Let me think')).toMatchObject({ reasoning_tokens: 7 });
    expect(await withReasoningTokens(usage, '')).toEqual(usage);
  });
});

describe('the adapter, against a vendor speaking Anthropic’s stream', () => {
  let server: http.Server;
  let base: string;
  const sse = (e: { type: string }) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          [
            start({ input_tokens: 4, cache_creation_input_tokens: 30, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 30 } }),
            { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
            { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me' } },
            { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: ' think' } },
            { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'S' } },
            { type: 'content_block_stop', index: 0 },
            { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } },
            { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'ok' } },
            { type: 'content_block_stop', index: 1 },
            delta({ input_tokens: 4, cache_creation_input_tokens: 30, cache_read_input_tokens: 0, output_tokens: 9 }),
            STOP,
          ]
            .map(sse)
            .join(''),
        );
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('emits one usage, last: 1-hour writes as such, reasoning tokens counted from the thinking text', async () => {
    const adapter = createAnthropicAdapter({ connectTimeoutMs: 2000, timeoutMs: 5000, env: { ANT_KEY: 'k' } });
    const call = makeCall('anthropic', {
      upstream: { id: 'anthropic/usage-test', upstream_model: 'claude-x', protocol: 'anthropic', base_url: base, api_key_env: 'ANT_KEY', reasoning: true },
    });
    const events: AdapterEvent[] = [];
    await adapter.stream(call, new AbortController().signal, (ev) => events.push(ev));
    expect(events.filter((e) => e.type === 'usage')).toHaveLength(1);
    expect(events.at(-1)).toEqual({ type: 'usage', prompt_tokens: 34, cache_write_1h_tokens: 30, completion_tokens: 9, reasoning_tokens: 3 });
    expect(events.filter((e) => e.type === 'reasoning').map((e) => (e as { content: string }).content)).toEqual(['Let me', ' think']);
  });
});
