import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockGemini, startMockGemini } from '../../../bench/mock-upstream/gemini.ts';
import type { AdapterEvent } from '../types.ts';
import { VertexTokens, vertexBaseUrl, vertexOf } from './api.ts';
import { createStreamDecoder, httpError, usageEvent } from './response.ts';

let mock: MockGemini;
let dir: string;
let saFile: string;

beforeAll(async () => {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  mock = await startMockGemini({
    apiKey: 'k',
    vertex: {
      project: 'p-123456',
      region: 'southamerica-east1',
      clientEmail: 'sa@p.iam.gserviceaccount.com',
      publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    },
  });
  dir = mkdtempSync(join(tmpdir(), 'catraca-vertex-unit-'));
  saFile = join(dir, 'sa.json');
  writeFileSync(
    saFile,
    JSON.stringify({
      client_email: 'sa@p.iam.gserviceaccount.com',
      private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      token_uri: mock.tokenUrl,
    }),
  );
});
afterAll(async () => {
  await mock?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('Vertex AI access tokens', () => {
  it('minted once for concurrent calls, reused while valid, minted again 5 minutes before expiry', async () => {
    let now = Date.now();
    const tokens = new VertexTokens(fetch, () => now);
    const [a, b] = await Promise.all([tokens.token(saFile), tokens.token(saFile)]);
    expect(a).toBe(b);
    expect(mock.stats.tokensMinted).toBe(1);
    now += 54 * 60_000; // 3599 s tokens: 5 minutes and 59 s left
    expect(await tokens.token(saFile)).toBe(a);
    now += 60_000; // under 5 minutes left
    const c = await tokens.token(saFile);
    expect(c).not.toBe(a);
    expect(mock.stats.tokensMinted).toBe(2);
  });

  it('a missing file is a configuration error; the Vertex base URL round-trips project and region', async () => {
    await expect(new VertexTokens().token(join(dir, 'absent.json'))).rejects.toMatchObject({ status: 502, code: 'upstream_not_configured' });
    const url = vertexBaseUrl('my-project', 'southamerica-east1');
    expect(url).toBe('https://southamerica-east1-aiplatform.googleapis.com/v1/projects/my-project/locations/southamerica-east1/publishers/google');
    expect(vertexOf(url)).toEqual({ project: 'my-project', region: 'southamerica-east1' });
    expect(vertexOf('https://generativelanguage.googleapis.com/v1beta')).toBeUndefined();
  });
});

describe('Gemini responses', () => {
  it('usage: cached is part of the prompt, thoughts are output apart from the candidates', () => {
    expect(usageEvent({ promptTokenCount: 100, candidatesTokenCount: 10, cachedContentTokenCount: 60, thoughtsTokenCount: 7 })).toEqual({
      type: 'usage',
      prompt_tokens: 100,
      completion_tokens: 17,
      cached_tokens: 60,
      reasoning_tokens: 7,
    });
  });

  it('a stream: thoughts, text, a finish with the last usage; a blocked prompt is content_filter', () => {
    const d = createStreamDecoder(null);
    const out: AdapterEvent[] = [];
    d.data(JSON.stringify({ candidates: [{ content: { parts: [{ text: 'hmm', thought: true }] } }], usageMetadata: { promptTokenCount: 5 } }), out);
    d.data(
      JSON.stringify({
        candidates: [{ content: { parts: [{ text: 'Oi' }] }, finishReason: 'STOP' }],
        usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 1, thoughtsTokenCount: 1 },
      }),
      out,
    );
    expect(out).toEqual([
      { type: 'reasoning', content: 'hmm' },
      { type: 'delta', content: 'Oi' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 5, completion_tokens: 2, reasoning_tokens: 1 },
    ]);
    const blocked: AdapterEvent[] = [];
    createStreamDecoder(null).data(JSON.stringify({ promptFeedback: { blockReason: 'SAFETY' }, usageMetadata: { promptTokenCount: 4 } }), blocked);
    expect(blocked).toEqual([
      { type: 'finish', reason: 'content_filter' },
      { type: 'usage', prompt_tokens: 4, completion_tokens: 0 },
    ]);
  });

  it("Google's errors: an invalid key is the operator's, RESOURCE_EXHAUSTED a rate limit, a too-long prompt context_length_exceeded", () => {
    const invalidKey = JSON.stringify({
      error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT', details: [{ reason: 'API_KEY_INVALID' }] },
    });
    expect(httpError(400, invalidKey, {}, null)).toMatchObject({ status: 502, code: 'upstream_auth_failed' });
    expect(
      httpError(429, JSON.stringify({ error: { code: 429, message: 'Resource has been exhausted', status: 'RESOURCE_EXHAUSTED' } }), {}, null),
    ).toMatchObject({ status: 429, code: 'upstream_rate_limited' });
    const long = JSON.stringify({
      error: { code: 400, message: 'The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).', status: 'INVALID_ARGUMENT' },
    });
    expect(httpError(400, long, {}, null)).toMatchObject({ status: 400, code: 'context_length_exceeded' });
  });
});
