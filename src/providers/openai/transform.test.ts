import { describe, expect, it } from 'vitest';
import type { AdapterEvent } from '../types.ts';
import { mapHttpError, parseRetryAfter, redact } from '../shared/upstream-errors.ts';
import { buildUpstreamBody } from './request.ts';
import { chunkEvents } from './response.ts';
import { makeCall } from '../../../test/helpers/worker.ts';

describe('request transform', () => {
  it('sets model/stream/usage/max_tokens, forwards documented parameters only, strips extensions and other dialects', () => {
    const call = makeCall('p', {
      upstream: { id: 'vendor/x', protocol: 'openai', upstream_model: 'gpt-4o-mini' },
      body: {
        messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }], cache_control: {} }],
        stream: false,
        stream_options: { foo: 1 },
        max_completion_tokens: null,
        logit_bias: { '1': 2 },
        sim: { first_token_ms: 1 },
        models: ['a/b'],
        provider: { order: ['x'] },
        transforms: ['middle-out'],
        usage: { include: true },
        reasoning: { effort: 'high' },
        route: 'fallback',
        top_k: 4,
        vendor_specific: { x: 1 },
        service_tier: 'default',
        seed: 3,
      },
      max_tokens: 77,
    });
    expect(buildUpstreamBody(call)).toEqual({
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
      stream: true,
      stream_options: { include_usage: true },
      logit_bias: { '1': 2 },
      model: 'gpt-4o-mini',
      max_tokens: 77,
      service_tier: 'default',
      seed: 3,
    });
  });

  it("forwards the catalog entry's extra_params, and max_completion_tokens instead of max_tokens when the client used it", () => {
    const call = makeCall('p', {
      upstream: { id: 'vendor/vllm', protocol: 'openai', upstream_model: 'llama', extra_params: ['top_k', 'mock'] },
      body: { messages: [{ role: 'user', content: 'x' }], top_k: 4, min_p: 0.1, mock: { output_tokens: 3 }, max_completion_tokens: 900 },
      max_tokens: 12,
    });
    expect(buildUpstreamBody(call)).toEqual({
      messages: [{ role: 'user', content: 'x' }],
      model: 'llama',
      stream: true,
      stream_options: { include_usage: true },
      top_k: 4,
      mock: { output_tokens: 3 },
      max_completion_tokens: 12,
    });
  });
});

describe('the output cap: max_completion_tokens for reasoning models and OpenAI itself, max_tokens for other OpenAI-compatible hosts', () => {
  const cap = (upstream: Record<string, unknown>, body: Record<string, unknown> = {}) => {
    const out = buildUpstreamBody(
      makeCall('p', {
        upstream: { id: 'vendor/cap', protocol: 'openai', upstream_model: 'm', ...upstream },
        body: { messages: [{ role: 'user', content: 'x' }], ...body },
        max_tokens: 40,
      }),
    );
    return { max_tokens: out.max_tokens, max_completion_tokens: out.max_completion_tokens };
  };
  it('a model the catalog marks reasoning gets max_completion_tokens, whatever the host', () => {
    expect(cap({ reasoning: true, base_url: 'http://127.0.0.1:8000/v1' })).toEqual({ max_tokens: undefined, max_completion_tokens: 40 });
    expect(cap({ reasoning: true, base_url: 'http://127.0.0.1:8000/v1' }, { max_tokens: 900 })).toEqual({ max_tokens: undefined, max_completion_tokens: 40 });
  });
  it('a deployment on api.openai.com gets max_completion_tokens for every model', () => {
    expect(cap({ base_url: 'https://api.openai.com/v1' }, { max_tokens: 900 })).toEqual({ max_tokens: undefined, max_completion_tokens: 40 });
    expect(cap({ base_url: 'https://API.openai.com:443/v1/' })).toEqual({ max_tokens: undefined, max_completion_tokens: 40 });
  });
  it('a generic OpenAI-compatible host keeps max_tokens unless the client used max_completion_tokens', () => {
    for (const base_url of [
      'http://127.0.0.1:8000/v1',
      'https://openrouter.ai/api/v1',
      'https://api.openai.com.example.net/v1',
      'https://proxy.example/api.openai.com/v1',
    ]) {
      expect(cap({ base_url }, { max_tokens: 900 })).toEqual({ max_tokens: 40, max_completion_tokens: undefined });
      expect(cap({ base_url }, { max_completion_tokens: 900 })).toEqual({ max_tokens: undefined, max_completion_tokens: 40 });
    }
  });
});

describe('response transform', () => {
  it('maps content, finish_reason and the usage chunk (choices [])', () => {
    const out: AdapterEvent[] = [];
    chunkEvents({ choices: [{ delta: { role: 'assistant', content: '' } as { content: string }, finish_reason: null }], usage: null }, out, null);
    chunkEvents({ choices: [{ delta: { content: 'Hi' }, finish_reason: null }] }, out, null);
    chunkEvents({ choices: [{ delta: {}, finish_reason: 'stop' }] }, out, null);
    chunkEvents({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 1 } }, out, null);
    expect(out).toEqual([
      { type: 'delta', content: 'Hi' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 9, completion_tokens: 1 },
    ]);
  });

  it("reads the usage's cache reads and reasoning (OpenAI's details), each at most its whole", () => {
    const out: AdapterEvent[] = [];
    const usage = (prompt_tokens_details: unknown, completion_tokens_details: unknown) =>
      ({ prompt_tokens: 100, completion_tokens: 20, prompt_tokens_details, completion_tokens_details }) as never;
    chunkEvents({ choices: [], usage: usage({ cached_tokens: 64, audio_tokens: 0 }, { reasoning_tokens: 12 }) }, out, null);
    chunkEvents({ choices: [], usage: usage({ cached_tokens: 500 }, { reasoning_tokens: -1 }) }, out, null);
    chunkEvents({ choices: [], usage: usage(null, null) }, out, null);
    expect(out).toEqual([
      { type: 'usage', prompt_tokens: 100, completion_tokens: 20, cached_tokens: 64, reasoning_tokens: 12 },
      { type: 'usage', prompt_tokens: 100, completion_tokens: 20, cached_tokens: 100 },
      { type: 'usage', prompt_tokens: 100, completion_tokens: 20 },
    ]);
  });

  it('turns an in-stream error event into an UpstreamError without key material', () => {
    expect(() => chunkEvents({ error: { message: 'boom for key sk-abcdef123456' } }, [], null)).toThrow(
      'The upstream provider failed mid-stream: boom for key [redacted]',
    );
  });
});

describe('error mapping', () => {
  it('maps statuses to our codes', () => {
    const m = (s: number, body = '', h: Record<string, string> = {}) => {
      const e = mapHttpError(s, body, h, 'sk-secret-value-123');
      return [e.status, e.code, e.retryAfter];
    };
    expect(m(400)).toEqual([400, 'upstream_bad_request', undefined]);
    expect(m(401)).toEqual([502, 'upstream_auth_failed', undefined]);
    expect(m(403)).toEqual([502, 'upstream_auth_failed', undefined]);
    expect(m(404)).toEqual([502, 'upstream_model_not_found', undefined]);
    expect(m(429, '', { 'retry-after': '7' })).toEqual([429, 'upstream_rate_limited', 7]);
    expect(m(429, '', { 'retry-after-ms': '1500' })).toEqual([429, 'upstream_rate_limited', 2]);
    expect(m(429)).toEqual([429, 'upstream_rate_limited', undefined]);
    expect(m(500)).toEqual([502, 'upstream_error', undefined]);
    expect(m(503)).toEqual([502, 'upstream_error', undefined]);
  });

  it('redacts the key and key-like strings from a passed-on 400 message', () => {
    const e = mapHttpError(400, JSON.stringify({ error: { message: 'bad thing with my-weird-key-XYZ and sk-proj-abc123def456' } }), {}, 'my-weird-key-XYZ');
    expect(e.message).toBe('bad thing with [redacted] and [redacted]');
    expect(redact('nothing here', null)).toBe('nothing here');
    expect(parseRetryAfter({})).toBeUndefined();
  });
});

describe('tool calls', () => {
  it('turns streamed tool_calls pieces into tool_calls events, index and id kept', () => {
    const out: AdapterEvent[] = [];
    chunkEvents(
      { choices: [{ delta: { content: null, tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }] } as never }] },
      out,
      null,
    );
    chunkEvents({ choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] } as never }] }, out, null);
    chunkEvents({ choices: [{ delta: {}, finish_reason: 'tool_calls' }] }, out, null);
    expect(out).toEqual([
      { type: 'tool_calls', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }] },
      { type: 'tool_calls', tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] },
      { type: 'finish', reason: 'tool_calls' },
    ]);
  });
});

describe('coalesceDeltas', () => {
  it('merges consecutive content deltas of one read, keeps everything else in order', async () => {
    const { coalesceDeltas } = await import('../shared/http-stream.ts');
    const events: AdapterEvent[] = [
      { type: 'delta', content: 'Hello' },
      { type: 'delta', content: ' world' },
      { type: 'tool_calls', tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
      { type: 'delta', content: '!' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 3, completion_tokens: 3 },
    ];
    coalesceDeltas(events);
    expect(events).toEqual([
      { type: 'delta', content: 'Hello world' },
      { type: 'tool_calls', tool_calls: [{ index: 0, function: { arguments: '{}' } }] },
      { type: 'delta', content: '!' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 3, completion_tokens: 3 },
    ]);
  });
});
