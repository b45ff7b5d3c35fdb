import { describe, expect, it } from 'vitest';
import { makeCall } from '../../../test/helpers/worker.ts';
import { float32Base64 } from '../shared/embeddings.ts';
import type { AdapterEvent } from '../types.ts';
import { embeddingTokens, SIM_EMBEDDING_DIMENSIONS, simEmbedding } from './embed.ts';
import { createSimAdapter } from './index.ts';

describe('sim embeddings', () => {
  it('are deterministic unit vectors of float32, different per input and salt', () => {
    const a = simEmbedding('embed', 'hello', 256);
    expect(a).toEqual(simEmbedding('embed', 'hello', 256));
    expect(a).not.toEqual(simEmbedding('embed', 'hello!', 256));
    expect(a).not.toEqual(simEmbedding('other', 'hello', 256));
    expect(simEmbedding('embed', [1, 2], 256)).not.toEqual(simEmbedding('embed', '1,2', 256));
    const norm = Math.sqrt(a.reduce((n, v) => n + v * v, 0));
    expect(Math.abs(norm - 1)).toBeLessThan(1e-6);
    expect(simEmbedding('embed', 'hello', 12)).toHaveLength(12);
  });

  it("count the sim's tokens of a text, or the token ids", () => {
    expect(embeddingTokens('Hello, world!')).toBe(2);
    expect(embeddingTokens([5, 6, 7])).toBe(3);
  });

  it('answer one body (dimensions honoured, base64 when asked) and the usage; refuse an input over the context', async () => {
    const sim = createSimAdapter({ firstTokenMs: 0, tokensPerSecond: 0 });
    const upstream = { id: 'sim/embed', upstream_model: 'embed', kind: 'embedding' as const, context_length: 3 };
    const events: AdapterEvent[] = [];
    const call = makeCall('sim', { api: 'embeddings', upstream, body: { input: ['a b', [9]], dimensions: 4, encoding_format: 'base64' }, max_tokens: 0 });
    await sim.stream(call, new AbortController().signal, (e) => events.push(e));
    const body = JSON.parse((events[0] as { json: string }).json);
    expect(body.data).toEqual([
      { object: 'embedding', index: 0, embedding: float32Base64(simEmbedding('embed', 'a b', 4)) },
      { object: 'embedding', index: 1, embedding: float32Base64(simEmbedding('embed', [9], 4)) },
    ]);
    expect(events.slice(1)).toEqual([
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 3, completion_tokens: 0 },
    ]);
    const float = makeCall('sim', { api: 'embeddings', upstream, body: { input: 'x' }, max_tokens: 0 });
    const out: AdapterEvent[] = [];
    await sim.stream(float, new AbortController().signal, (e) => out.push(e));
    expect(JSON.parse((out[0] as { json: string }).json).data[0].embedding).toEqual(Array.from(simEmbedding('embed', 'x', SIM_EMBEDDING_DIMENSIONS)));
    const long = makeCall('sim', { api: 'embeddings', upstream, body: { input: 'a b c d' }, max_tokens: 0 });
    await expect(sim.stream(long, new AbortController().signal, () => {})).rejects.toMatchObject({ status: 400, code: 'upstream_bad_request' });
    expect(long.accepted).toBe(false);
  });
});
