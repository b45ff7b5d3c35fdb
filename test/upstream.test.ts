import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { mockText, MOCK_REASONING, MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS } from '../bench/mock-upstream/content.ts';
import { upsertModel } from '../src/db/models.ts';
import { costMicros } from '../src/billing/money.ts';
import { countTokens, promptTokens } from '../src/providers/sim/tokens.ts';

// A real OpenAI-compatible vendor registered with `model set --pool openai`, reached through the
// whole path: client → front door → NATS → worker (openai adapter) → mock vendor and back.
const UPSTREAM_KEY = 'sk-upstream-9f8e7d6c5b4a39281706f5e4d3c2b1a0';
const PRICES = { input: 3_000_000n, output: 12_000_000n }; // R$ 3 / R$ 12 per 1M tokens

let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'openai,anthropic' }));
  const models: Record<string, string> = {
    ok: 'gpt-4o-mini',
    ratelimited: 'mock-429',
    midstream: 'mock-fail-midstream',
    slow: 'mock-slow',
    nousage: 'mock-no-usage',
    authfail: 'mock-401',
    tools: 'mock-tools',
    reasoning: 'mock-reasoning',
  };
  for (const [id, upstream] of Object.entries(models)) {
    await upsertModel(stack.db, {
      id: `mockvendor/${id}`,
      pool: 'openai',
      upstream_model: upstream,
      base_url: mock.url,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: PRICES.input,
      output_price: PRICES.output,
    });
  }
  for (const [id, upstream] of Object.entries({
    ok: 'mock-claude',
    overloaded: 'mock-claude-overloaded',
    midstream: 'mock-claude-midstream-error',
    tools: 'mock-claude-tools',
  })) {
    await upsertModel(stack.db, {
      id: `mockclaude/${id}`,
      pool: 'anthropic',
      upstream_model: upstream,
      base_url: mock.url,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: PRICES.input,
      output_price: PRICES.output,
    });
  }
}, 60000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

/** A raw chat request (status codes, headers and SSE bytes exactly as a client sees them). */
const post = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }),
  });

/** Reads a streamed answer with one tool call: its text, the call's pieces joined, finish and usage. */
async function collectToolCall(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  const out = { content: '', id: '', name: '', args: '', finish: '', usage: undefined as OpenAI.Completions.CompletionUsage | undefined };
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    out.content += d?.content ?? '';
    for (const c of d?.tool_calls ?? []) {
      expect(c.index).toBe(0);
      if (c.id) out.id = c.id;
      if (c.function?.name) out.name = c.function.name;
      out.args += c.function?.arguments ?? '';
    }
    if (chunk.choices[0]?.finish_reason) out.finish = chunk.choices[0].finish_reason;
    if (chunk.usage) out.usage = chunk.usage;
  }
  return out;
}

const ledgerRow = async (requestId: string) => (await stack.db.query('select * from ledger where request_id = $1', [requestId])).rows[0];

describe('OpenAI-compatible vendor through the gateway', () => {
  it('streams from the vendor, asks it for usage, passes unknown parameters, bills its usage', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions
      .create({
        model: 'mockvendor/ok',
        messages: [{ role: 'user', content: 'hello there' }],
        stream: true,
        stream_options: { include_usage: true },
        seed: 7,
        user: 'u-1',
        max_tokens: 10,
      })
      .withResponse();
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of res.data) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(mockText(10));
    expect(mock.stats.lastBody).toMatchObject({
      model: 'gpt-4o-mini',
      stream: true,
      stream_options: { include_usage: true },
      seed: 7,
      user: 'u-1',
      max_tokens: 10,
    });
    expect(mock.stats.lastBody).not.toHaveProperty('sim');
    expect(mock.stats.lastAuthorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    const requestId = res.response.headers.get('x-request-id')!;
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row.output_tokens).toBe(10);
    expect(row.input_tokens).toBe(usage!.prompt_tokens);
    expect(row.estimated).toBe(false);
    expect(row.amount_micros).toBe(costMicros(usage!.prompt_tokens, 10, PRICES));
  });

  it('maps an upstream 429 to 429 with retry-after, charging nothing', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { model: 'mockvendor/ratelimited' });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('1');
    const body = await res.json();
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'upstream_rate_limited', param: null });
    await stack.waitSettled([res.headers.get('x-request-id')!]);
    expect((await ledgerRow(res.headers.get('x-request-id')!)).amount_micros).toBe(0n);
    await stack.waitNoHolds(t.tenantId);
  });

  it('maps an upstream 401 to 502 without revealing the upstream key', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { model: 'mockvendor/authfail' });
    expect(res.status).toBe(502);
    const text = await res.text();
    expect(JSON.parse(text).error).toMatchObject({ type: 'upstream_error', code: 'upstream_auth_failed' });
    expect(text).not.toContain(UPSTREAM_KEY.slice(0, 12));
  });

  it('a mid-stream vendor failure ends the stream with an error event and bills the delivered tokens once', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { model: 'mockvendor/midstream', stream: true });
    expect(res.status).toBe(200);
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const last = JSON.parse(events[events.length - 2].slice(6));
    expect(last.choices[0].finish_reason).toBe('error');
    expect(last.error).toMatchObject({ code: 'upstream_stream_interrupted', status: 502 });
    const contents = events.slice(1, -2).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content);
    expect(contents.join('')).toBe(mockText(3));
    const requestId = res.headers.get('x-request-id')!;
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row).toMatchObject({ outcome: 'error', output_tokens: 3, estimated: true });
    expect(row.amount_micros).toBe(costMicros(row.input_tokens, 3, PRICES));
  });

  it('the openai client surfaces the mid-stream error as an APIError', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'mockvendor/midstream', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let text = '';
    await expect(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      })(),
    ).rejects.toThrow(/interrupted/);
    expect(text).toBe(mockText(3));
  });

  it('counts tokens itself when the vendor sends no usage, marked estimated', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions
      .create({ model: 'mockvendor/nousage', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })
      .withResponse();
    expect(res.data.choices[0].message.content).toBe(mockText(5));
    expect((res.data.usage as unknown as { estimated?: boolean }).estimated).toBe(true);
    await stack.waitSettled([res.response.headers.get('x-request-id')!]);
    const row = await ledgerRow(res.response.headers.get('x-request-id')!);
    expect(row.estimated).toBe(true);
    expect(row.output_tokens).toBe(res.data.usage!.completion_tokens);
  });

  it('client disconnect aborts the vendor call (the vendor sees it) and bills what was generated', async () => {
    const t = await stack.tenant('1.00');
    const abortedBefore = mock.stats.aborted;
    const controller = new AbortController();
    const res = await post(t.key, { model: 'mockvendor/slow', stream: true, max_tokens: 200 }, controller.signal);
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"content":"[^"]/g) ?? []).length < 2) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const deadline = Date.now() + 3000;
    while (mock.stats.aborted === abortedBefore && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(mock.stats.aborted).toBe(abortedBefore + 1);
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row.outcome).toBe('cancelled');
    expect(row.output_tokens).toBeGreaterThanOrEqual(2);
    expect(row.output_tokens).toBeLessThan(8);
    await stack.waitNoHolds(t.tenantId);
  });

  const tools = [{ type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];

  it('relays streamed tool calls piece by piece, as the vendor sent them', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const stream = await client.chat.completions.create({
      model: 'mockvendor/tools',
      stream: true,
      stream_options: { include_usage: true },
      tools,
      messages: [{ role: 'user', content: 'weather in SP?' }],
    });
    const { id, name, args, finish, usage } = await collectToolCall(stream);
    expect({ id, name, args, finish }).toEqual({ id: MOCK_TOOL_CALL.id, name: MOCK_TOOL_CALL.name, args: MOCK_TOOL_CALL.arguments, finish: 'tool_calls' });
    expect(usage!.completion_tokens).toBe(MOCK_TOOL_COMPLETION_TOKENS);
    expect(mock.stats.lastBody).toMatchObject({ tools });
  });

  it('assembles tool calls into the non-streamed message and bills the vendor usage', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions
      .create({ model: 'mockvendor/tools', tools, messages: [{ role: 'user', content: 'weather in SP?' }] })
      .withResponse();
    const choice = res.data.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([
      { id: MOCK_TOOL_CALL.id, type: 'function', function: { name: MOCK_TOOL_CALL.name, arguments: MOCK_TOOL_CALL.arguments } },
    ]);
    expect(JSON.parse((choice.message.tool_calls![0] as { function: { arguments: string } }).function.arguments)).toEqual({
      city: 'São Paulo',
      unit: 'celsius',
    });
    const requestId = res.response.headers.get('x-request-id')!;
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row.output_tokens).toBe(MOCK_TOOL_COMPLETION_TOKENS);
    expect(row.amount_micros).toBe(costMicros(row.input_tokens, MOCK_TOOL_COMPLETION_TOKENS, PRICES));
  });

  it('relays reasoning as OpenRouter does (delta.reasoning, message.reasoning) and bills it as output', async () => {
    const t = await stack.tenant('1.00');
    const ask = (stream: boolean) => post(t.key, { model: 'mockvendor/reasoning', stream, max_tokens: 4, messages: [{ role: 'user', content: 'why?' }] });
    const streamed = (await (await ask(true)).text())
      .split('\n\n')
      .filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)));
    const reasoning = streamed.map((c) => c.choices[0]?.delta?.reasoning).filter(Boolean);
    expect(reasoning).toEqual(MOCK_REASONING);
    expect(streamed.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(mockText(4));
    const res = await ask(false);
    const body = await res.json();
    expect(body.choices[0].message).toMatchObject({ content: mockText(4), reasoning: MOCK_REASONING.join('') });
    expect(body.usage.completion_tokens).toBe(4 + MOCK_REASONING.length);
    await stack.waitSettled([res.headers.get('x-request-id')!]);
    expect((await ledgerRow(res.headers.get('x-request-id')!)).output_tokens).toBe(4 + MOCK_REASONING.length);
  });

  describe('Anthropic Messages vendor (pool anthropic)', () => {
    it('translates the request, streams the answer in OpenAI chunks and bills Anthropic usage', async () => {
      const t = await stack.tenant('1.00');
      const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
      const messages = [
        { role: 'system' as const, content: 'Be brief.' },
        { role: 'user' as const, content: 'hello there' },
      ];
      const res = await client.chat.completions
        .create({ model: 'mockclaude/ok', messages, stream: true, stream_options: { include_usage: true }, max_tokens: 6, temperature: 1.5, seed: 3 })
        .withResponse();
      let text = '';
      let finish = '';
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const chunk of res.data) {
        text += chunk.choices[0]?.delta?.content ?? '';
        if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe(mockText(6));
      expect(finish).toBe('length');
      expect(mock.stats.lastAuthorization).toBe(`x-api-key ${UPSTREAM_KEY}`);
      expect(mock.stats.lastBody).toEqual({
        model: 'mock-claude',
        max_tokens: 6,
        stream: true,
        system: 'Be brief.',
        temperature: 1,
        messages: [{ role: 'user', content: 'hello there' }],
      });
      const prompt = promptTokens([{ content: 'hello there' }]) + countTokens('Be brief.');
      expect(usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 6 });
      const requestId = res.response.headers.get('x-request-id')!;
      await stack.waitSettled([requestId]);
      const row = await ledgerRow(requestId);
      expect(row).toMatchObject({ input_tokens: prompt, output_tokens: 6, estimated: false, outcome: 'completed' });
      expect(row.amount_micros).toBe(costMicros(prompt, 6, PRICES));
    });

    it('maps Anthropic 529 overloaded to 503, charging nothing', async () => {
      const t = await stack.tenant('1.00');
      const res = await post(t.key, { model: 'mockclaude/overloaded' });
      expect(res.status).toBe(503);
      expect((await res.json()).error).toMatchObject({ type: 'service_unavailable', code: 'upstream_overloaded' });
      await stack.waitNoHolds(t.tenantId);
    });

    it('an Anthropic error event mid-stream ends the SSE with finish_reason "error", partial output billed once', async () => {
      const t = await stack.tenant('1.00');
      const res = await post(t.key, { model: 'mockclaude/midstream', stream: true });
      expect(res.status).toBe(200);
      const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '));
      const last = JSON.parse(events[events.length - 2].slice(6));
      expect(last.choices[0].finish_reason).toBe('error');
      expect(last.error).toMatchObject({ code: 'upstream_overloaded', status: 503 });
      expect(
        events
          .slice(1, -2)
          .map((e) => JSON.parse(e.slice(6)).choices[0].delta.content)
          .join(''),
      ).toBe(mockText(3));
      const requestId = res.headers.get('x-request-id')!;
      await stack.waitSettled([requestId]);
      expect(await ledgerRow(requestId)).toMatchObject({ outcome: 'error', output_tokens: 3, estimated: true });
    });

    it('translates tools and streams tool_use back as OpenAI tool_calls', async () => {
      const t = await stack.tenant('1.00');
      const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
      const stream = await client.chat.completions.create({
        model: 'mockclaude/tools',
        stream: true,
        tools,
        tool_choice: 'required',
        messages: [{ role: 'user', content: 'weather in SP?' }],
      });
      const { content, id, name, args, finish } = await collectToolCall(stream);
      expect({ content, id, name, args, finish }).toEqual({
        content: 'Checking.',
        id: 'toolu_mock_weather_1',
        name: 'get_weather',
        args: MOCK_TOOL_CALL.arguments,
        finish: 'tool_calls',
      });
      expect(mock.stats.lastBody).toMatchObject({
        tools: [{ name: 'get_weather', input_schema: tools[0].function.parameters }],
        tool_choice: { type: 'any' },
      });
    });

    it('sends assistant tool calls and tool results back as tool_use / tool_result blocks', async () => {
      const t = await stack.tenant('1.00');
      const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
      const res = await client.chat.completions.create({
        model: 'mockclaude/tools',
        tools,
        messages: [
          { role: 'user', content: 'weather in SP?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"SP"}' } }],
          },
          { role: 'tool', tool_call_id: 'toolu_1', content: '25 C' },
        ],
      });
      expect(mock.stats.lastBody!.messages).toEqual([
        { role: 'user', content: 'weather in SP?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'SP' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '25 C' }] },
      ]);
      expect(res.choices[0].finish_reason).toBe('tool_calls');
      expect(res.choices[0].message.content).toBe('Checking.');
      expect(res.choices[0].message.tool_calls).toEqual([
        { id: 'toolu_mock_weather_1', type: 'function', function: { name: 'get_weather', arguments: MOCK_TOOL_CALL.arguments } },
      ]);
    });

    it('refuses what it cannot translate with a clear 400 (images for this vendor)', async () => {
      const t = await stack.tenant('1.00');
      const res = await post(t.key, {
        model: 'mockclaude/ok',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }],
      });
      expect(res.status).toBe(400);
      // refused by the front door before any hold: the catalog entry accepts text only
      expect((await res.json()).error).toEqual({
        type: 'invalid_request_error',
        code: 'unsupported_content',
        param: 'messages[0].content[0]',
        message: 'This model does not accept image input.',
      });
      expect((await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [t.tenantId])).rows[0].n).toBe(0);
    });
  });

  it('never logs the upstream key or a client key', () => {
    const lines = stack.allLogLines().join('\n');
    expect(lines).not.toContain(UPSTREAM_KEY);
    expect(lines).not.toMatch(/sk-cat-v1-[0-9a-f]{8}/);
  });
});
