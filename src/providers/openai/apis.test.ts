import { describe, expect, it } from 'vitest';
import { makeCall } from '../../../test/helpers/worker.ts';
import { float32Base64 } from '../shared/embeddings.ts';
import type { AdapterEvent } from '../types.ts';
import { completionsProtocol, completionsRequestBody, textCompletionEvents } from './completions.ts';
import { embeddingsEvents, embeddingsProtocol, embeddingsRequestBody } from './embeddings.ts';

const upstream = {
  id: 'vendor/emb',
  protocol: 'openai' as const,
  upstream_model: 'text-embedding-3-small',
  base_url: 'http://v.test/v1',
  kind: 'embedding' as const,
};

describe('embeddings transform', () => {
  it('posts {base}/embeddings an allowlisted body, the encoding the client asked', () => {
    const call = makeCall('p', {
      api: 'embeddings',
      upstream: { ...upstream, extra_params: ['truncate'] },
      body: { input: ['a', 'b'], dimensions: 8, user: 'u', truncate: 'END', sim: {}, secret: 1 },
      max_tokens: 0,
    });
    expect(embeddingsProtocol(call).url('http://v.test/v1/').href).toBe('http://v.test/v1/embeddings');
    expect(embeddingsRequestBody(call)).toEqual({
      model: 'text-embedding-3-small',
      input: ['a', 'b'],
      encoding_format: 'float',
      dimensions: 8,
      user: 'u',
      truncate: 'END',
    });
  });

  it("answers our body (catalog id, the client's encoding, input order) and the vendor's prompt tokens", () => {
    const call = makeCall('p', { api: 'embeddings', upstream, body: { input: ['a', 'b'], encoding_format: 'base64' }, max_tokens: 0 });
    const out: AdapterEvent[] = [];
    const b64 = float32Base64([0.5, 0.25]);
    embeddingsEvents(
      call,
      {
        data: [
          { index: 1, embedding: [1, 2] },
          { index: 0, embedding: b64 },
        ],
        usage: { prompt_tokens: 4 },
      },
      out,
      null,
    );
    expect(out.map((e) => e.type)).toEqual(['body', 'finish', 'usage']);
    expect(JSON.parse((out[0] as { json: string }).json)).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: b64 },
        { object: 'embedding', index: 1, embedding: float32Base64([1, 2]) },
      ],
      model: 'vendor/emb',
      usage: { prompt_tokens: 4, total_tokens: 4 },
    });
    expect(out[2]).toEqual({ type: 'usage', prompt_tokens: 4, completion_tokens: 0 });
  });

  it('fails on an answer that does not fit the inputs, and emits no usage when the vendor gave none', () => {
    const call = makeCall('p', { api: 'embeddings', upstream, body: { input: ['a', 'b'] }, max_tokens: 0 });
    expect(() => embeddingsEvents(call, { data: [{ index: 0, embedding: [1] }] }, [], null)).toThrow('answered 1 embeddings for 2 inputs');
    expect(() =>
      embeddingsEvents(
        call,
        {
          data: [
            { index: 0, embedding: [1] },
            { index: 0, embedding: [2] },
          ],
        },
        [],
        null,
      ),
    ).toThrow('unreadable');
    const out: AdapterEvent[] = [];
    embeddingsEvents(call, { data: [{ embedding: [1] }, { embedding: [2] }] }, out, null);
    expect(out.map((e) => e.type)).toEqual(['body', 'finish']);
  });
});

describe('legacy completions transform', () => {
  it('posts {base}/completions the prompt, documented parameters, the held max_tokens, streamed with usage', () => {
    const call = makeCall('p', {
      api: 'completions',
      upstream: { ...upstream, kind: 'chat', legacy_completions: true, upstream_model: 'gpt-3.5-turbo-instruct' },
      body: {
        prompt: 'Say',
        suffix: '!',
        stop: '\n',
        temperature: 0,
        seed: 2,
        user: 'u',
        n: 1,
        best_of: 1,
        echo: false,
        logprobs: null,
        sim: {},
        stream: false,
        max_tokens: 999,
      },
      max_tokens: 30,
    });
    expect(completionsProtocol.url('http://v.test/v1').href).toBe('http://v.test/v1/completions');
    expect(completionsRequestBody(call)).toEqual({
      model: 'gpt-3.5-turbo-instruct',
      prompt: 'Say',
      suffix: '!',
      stop: '\n',
      temperature: 0,
      seed: 2,
      user: 'u',
      max_tokens: 30,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('reads text_completion chunks: text, finish_reason, the usage chunk; an error event fails', () => {
    const out: AdapterEvent[] = [];
    const decoder = completionsProtocol.streamDecoder(null);
    decoder.data('{"choices":[{"text":"Hel","index":0,"logprobs":null,"finish_reason":null}]}', out);
    decoder.data('{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}]}', out);
    decoder.data('{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}', out);
    expect(decoder.data('[DONE]', out)).toBe('done');
    expect(out).toEqual([
      { type: 'delta', content: 'Hel' },
      { type: 'finish', reason: 'length' },
      { type: 'usage', prompt_tokens: 2, completion_tokens: 1 },
    ]);
    expect(() => textCompletionEvents({ error: { message: 'boom sk-abcdef1234567' } }, [], null)).toThrow('failed mid-stream: boom [redacted]');
    const whole: AdapterEvent[] = [];
    completionsProtocol.completion({ choices: [{ text: 'x' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }, whole, null);
    expect(whole).toEqual([
      { type: 'delta', content: 'x' },
      { type: 'usage', prompt_tokens: 1, completion_tokens: 1 },
      { type: 'finish', reason: 'stop' },
    ]);
  });
});
