import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { knownParams } from '../../src/chat/params.ts';
import { buildUpstreamBody } from '../../src/providers/openai/request.ts';
import type { UpstreamCall } from '../../src/providers/types.ts';
import { OPENAI_PARAMS, startMockUpstream, type MockUpstream } from './server.ts';
import { mockText } from './content.ts';

// The official client is the judge of the mock's wire format.
let mock: MockUpstream;
let client: OpenAI;
beforeAll(async () => {
  mock = await startMockUpstream({ outputTokens: 6 });
  client = new OpenAI({ baseURL: mock.url, apiKey: 'sk-mock-test', maxRetries: 0 });
});
afterAll(async () => {
  await mock.close();
});

describe('mock upstream', () => {
  it('streams chat.completion.chunk events with a usage chunk and [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: 'mock-gpt',
      messages: [{ role: 'user', content: 'one two' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '', refusal: null });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello world foo bar baz qux');
    expect(mockText(6)).toBe('Hello world foo bar baz qux');
    expect(chunks.at(-2)!.choices[0].finish_reason).toBe('stop');
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 8, completion_tokens: 6, total_tokens: 14 });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'mock-gpt')).toBe(true);
    expect(mock.stats.lastAuthorization).toBe('Bearer sk-mock-test');
  });

  it('answers non-stream with a chat.completion honouring max_tokens', async () => {
    const r = await client.chat.completions.create({ model: 'mock-gpt', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant', content: 'Hello world' }, finish_reason: 'length' });
    expect(r.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 });
  });

  it('fails like OpenAI: 429 with retry-after, 401 without a key, 500', async () => {
    const err429 = await client.chat.completions.create({ model: 'mock-429', messages: [] }).catch((e) => e);
    expect(err429).toBeInstanceOf(OpenAI.RateLimitError);
    expect(err429.headers.get('retry-after')).toBe('1');
    expect(err429.error).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded', param: null });
    const err500 = await client.chat.completions.create({ model: 'mock-500', messages: [] }).catch((e) => e);
    expect(err500).toBeInstanceOf(OpenAI.InternalServerError);
    const noKey = await fetch(`${mock.url}/chat/completions`, { method: 'POST', body: '{}' });
    expect(noKey.status).toBe(401);
    expect((await noKey.json()).error.type).toBe('invalid_request_error');
  });

  it("knows OpenAI's chat fields as the gateway does: it refuses none the gateway sends, and the gateway has a rule for each", () => {
    // everything the gateway may put in an OpenAI-protocol vendor's body: every field of the client's, through the worker's body builder
    const body = { ...Object.fromEntries([...knownParams('openai')].map((k) => [k, k === 'service_tier' ? 'auto' : null])), messages: [] };
    const call = (reasoning: boolean) =>
      ({
        job: { body, max_tokens: 16 },
        model: { protocol: 'openai', extra_params: [], upstream_model: 'gpt-4o-mini', reasoning, base_url: null },
      }) as unknown as UpstreamCall;
    const sent = new Set([false, true].flatMap((reasoning) => Object.keys(buildUpstreamBody(call(reasoning)))));
    expect([...sent].filter((k) => !OPENAI_PARAMS.has(k))).toEqual([]);
    // every documented field (but the mock's own `mock`) is forwarded, handled or refused by the gateway, never unknown
    expect([...OPENAI_PARAMS].filter((k) => k !== 'mock' && !knownParams('openai').has(k))).toEqual([]);
    // the 20 parameters forwarded as given, service_tier, and the 6 fields the worker writes itself
    expect(sent.size).toBe(27);
  });

  it('lists models and exposes stats', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain('mock-slow');
    const s = await (await fetch(`${mock.url.replace(/\/v1$/, '')}/stats`)).json();
    expect(s.requests).toBeGreaterThanOrEqual(5);
    expect(s).toHaveProperty('aborted');
  });
});
