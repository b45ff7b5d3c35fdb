import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MOCK_REASONING, MOCK_TOOL_COMPLETION_TOKENS, mockText } from '../bench/mock-upstream/content.ts';
import { type MockUpstream, mockPromptTokens } from '../bench/mock-upstream/server.ts';
import { MOCK_LOOP_INPUT } from '../bench/mock-upstream/tool-loop.ts';
import { type BilledTokens, costMicros, type Prices, usageCostMicros } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';
import { countTokens, promptTokens } from '../src/providers/sim/tokens.ts';
import { SIM_PRICES, startStackWithVendor, type TestStack } from './helpers/stack.ts';
import { UNDER_CI } from './helpers/tools.ts';

// POST /v1/responses (and GET/DELETE /v1/responses/{id}, /input_items) through the whole path with
// real clients — the openai SDK and the Codex CLI — against the sim, an OpenAI-compatible mock
// vendor and an Anthropic-protocol mock vendor (the request translated to chat, then to Anthropic
// Messages by the adapter). Every debit is checked to the micro-real against the vendor's counts.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const CODEX = join(ROOT, 'node_modules', '.bin', 'codex');
const UPSTREAM_KEY = 'sk-upstream-5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d';
const PRICES: Prices = { input: 3_000_000n, output: 12_000_000n, cachedInput: 300_000n };

let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'sim,openai,anthropic' }));
  const models: Array<[string, string, string]> = [
    ['mockvendor/ok', 'openai', 'gpt-4o-mini'],
    ['mockvendor/loop', 'openai', 'mock-tool-loop'],
    ['mockvendor/reasoning', 'openai', 'mock-reasoning'],
    ['mockclaude/ok', 'anthropic', 'mock-claude'],
  ];
  for (const [id, pool, upstream] of models) {
    await upsertModel(stack.db, {
      id,
      pool,
      upstream_model: upstream,
      base_url: mock.url,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: PRICES.input,
      output_price: PRICES.output,
      cached_input_price: PRICES.cachedInput,
    });
  }
}, 60000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

async function balanceOf(tenantId: string): Promise<bigint> {
  const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [tenantId]);
  return rows[0].balance_micros;
}

const debit = async (requestId: string) => (await stack.db.query("select * from ledger where request_id = $1 and kind = 'debit'", [requestId])).rows[0];

/** The mock's OpenAI usage for the body it was sent: the sim's count, tools, half cached with a prompt_cache_key. */
function mockUsage(body: Record<string, unknown>, completion: number, reasoning = 0): BilledTokens & { reasoning_tokens: number } {
  const prompt = mockPromptTokens(body);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    cached_tokens: typeof body.prompt_cache_key === 'string' ? Math.floor(prompt / 2) : 0,
    reasoning_tokens: reasoning,
  };
}

interface WireEvent {
  event: string;
  data: Record<string, unknown> & { type: string; sequence_number: number };
}

/** A raw streamed answer as its SSE events (comments skipped). */
async function sseEvents(res: Response): Promise<WireEvent[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((b) => b.trim() && !b.startsWith(':'))
    .map((b) => {
      const event = /^event: (.*)$/m.exec(b)?.[1] ?? '';
      const data = JSON.parse(/^data: (.*)$/m.exec(b)?.[1] ?? 'null');
      return { event, data };
    });
}

const post = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${stack.baseUrl}/responses`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('POST /v1/responses with the openai SDK', () => {
  it('answers sim/echo not streamed: a Response, stored, billed exactly; /generation takes its id', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    const text = 'Olá, catraca! Quanto custa?';
    const { data, response } = await client.responses.create({ model: 'sim/echo', input: text, instructions: 'Repita.' }).withResponse();
    const requestId = response.headers.get('x-request-id')!;
    expect(data.id).toBe(`resp_${requestId.slice('gen-'.length)}`);
    expect(data).toMatchObject({ object: 'response', status: 'completed', model: 'sim/echo', instructions: 'Repita.', store: true });
    expect(data.output_text).toBe(text);
    expect(Number.isInteger(data.created_at)).toBe(true);
    const prompt = promptTokens([{ content: 'Repita.' }, { content: text }]);
    expect(data.usage).toMatchObject({
      input_tokens: prompt,
      output_tokens: 4,
      total_tokens: prompt + 4,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens_details: { reasoning_tokens: 0 },
    });
    const cost = costMicros(prompt, 4, SIM_PRICES.echo);
    await stack.waitSettled([requestId]);
    const row = await debit(requestId);
    expect(row).toMatchObject({ amount_micros: cost, input_tokens: prompt, output_tokens: 4, route: 'responses', outcome: 'completed' });
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - cost);
    const generation = await fetch(`${stack.baseUrl}/generation?id=${data.id}`, { headers: { authorization: `Bearer ${t.key}` } });
    expect(((await generation.json()) as { data: { id: string; total_cost: number } }).data).toMatchObject({ id: requestId, total_cost: Number(cost) / 1e6 });
    const stored = await client.responses.retrieve(data.id);
    expect(stored).toMatchObject({ id: data.id, status: 'completed', output: data.output, usage: data.usage, instructions: 'Repita.' });
  });

  it('streams from an OpenAI-compatible vendor: typed, numbered events, response.completed with usage', async () => {
    const t = await stack.tenant('1.00');
    const stream = await clientOf(t.key).responses.create({ model: 'mockvendor/ok', input: 'hello there', stream: true, max_output_tokens: 10 });
    const events: Array<{ type: string; sequence_number: number }> = [];
    let text = '';
    for await (const e of stream) {
      events.push(e);
      if (e.type === 'response.output_text.delta') text += e.delta;
    }
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events[0].type).toBe('response.created');
    expect(text).toBe(mockText(10));
    const last = events[events.length - 1] as OpenAI.Responses.ResponseIncompleteEvent;
    // 16 natural tokens cut at 10: incomplete, as OpenAI reports a response cut by max_output_tokens
    expect(last.type).toBe('response.incomplete');
    expect(last.response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    const usage = mockUsage(mock.stats.lastBody!, 10);
    expect(mock.stats.lastBody).toMatchObject({ model: 'gpt-4o-mini', max_completion_tokens: 10, messages: [{ role: 'user', content: 'hello there' }] });
    expect(last.response.usage).toMatchObject({ input_tokens: usage.prompt_tokens, output_tokens: 10, output_tokens_details: { reasoning_tokens: 0 } });
    expect(Number.isInteger(last.response.created_at)).toBe(true);
    const requestId = `gen-${last.response.id.slice('resp_'.length)}`;
    await stack.waitSettled([requestId]);
    expect((await debit(requestId)).amount_micros).toBe(usageCostMicros(usage, PRICES));
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - usageCostMicros(usage, PRICES));
  });

  it('streams sim/echo and answers the OpenAI-compatible vendor not streamed, each billed exactly', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const e of await client.responses.create({ model: 'sim/echo', input: 'um dois três', stream: true })) {
      if (e.type === 'response.output_text.delta') text += e.delta;
      if (e.type === 'response.completed') completed = e.response;
    }
    expect(text).toBe('um dois três');
    const simPrompt = promptTokens([{ content: 'um dois três' }]);
    expect(completed?.usage).toMatchObject({ input_tokens: simPrompt, output_tokens: 3, output_tokens_details: { reasoning_tokens: 0 } });
    const r = await client.responses.create({ model: 'mockvendor/ok', input: 'not streamed please', max_output_tokens: 5 });
    expect(r).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output_text: mockText(5) });
    const usage = mockUsage(mock.stats.lastBody!, 5);
    const ids = [completed!.id, r.id].map((id) => `gen-${id.slice('resp_'.length)}`);
    await stack.waitSettled(ids);
    const spent = costMicros(simPrompt, 3, SIM_PRICES.echo) + usageCostMicros(usage, PRICES);
    expect((await debit(ids[0])).amount_micros).toBe(costMicros(simPrompt, 3, SIM_PRICES.echo));
    expect((await debit(ids[1])).amount_micros).toBe(usageCostMicros(usage, PRICES));
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - spent);
  });

  it('writes every SSE event as `event: <type>` with its type in the data, sequence numbers from 0, reasoning as a summary', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { model: 'mockvendor/reasoning', input: 'why?', stream: true });
    expect(res.status).toBe(200);
    const events = await sseEvents(res);
    for (const [i, e] of events.entries()) {
      expect(e.event).toBe(e.data.type);
      expect(e.data.sequence_number).toBe(i);
    }
    const types = events.map((e) => e.data.type);
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.reasoning_summary_part.added']);
    expect(types.filter((x) => x === 'response.reasoning_summary_text.delta')).toHaveLength(MOCK_REASONING.length);
    const completed = events[events.length - 1].data as unknown as OpenAI.Responses.ResponseCompletedEvent;
    expect(completed.type).toBe('response.completed');
    expect(completed.response.output[0]).toMatchObject({ type: 'reasoning', summary: [{ type: 'summary_text', text: MOCK_REASONING.join('') }] });
    expect(completed.response.output[1]).toMatchObject({ type: 'message', content: [{ type: 'output_text', text: mockText(16) }] });
    const usage = mockUsage(mock.stats.lastBody!, 16 + MOCK_REASONING.length, MOCK_REASONING.length);
    expect(completed.response.usage).toMatchObject({
      input_tokens: usage.prompt_tokens,
      output_tokens: usage.completion_tokens,
      output_tokens_details: { reasoning_tokens: MOCK_REASONING.length },
    });
    const requestId = res.headers.get('x-request-id')!;
    await stack.waitSettled([requestId]);
    expect(await debit(requestId)).toMatchObject({ amount_micros: usageCostMicros(usage, PRICES), reasoning_tokens: MOCK_REASONING.length });
  });

  for (const stream of [false, true]) {
    it(`answers through an Anthropic-protocol vendor (${stream ? 'streamed' : 'not streamed'}), billed its usage`, async () => {
      const t = await stack.tenant('1.00');
      const client = clientOf(t.key);
      const input = [
        { role: 'developer' as const, content: 'Be terse.' },
        { role: 'user' as const, content: [{ type: 'input_text' as const, text: 'hello claude' }] },
      ];
      let text = '';
      let id = '';
      if (stream) {
        for await (const e of await client.responses.create({ model: 'mockclaude/ok', input, stream: true })) {
          if (e.type === 'response.output_text.delta') text += e.delta;
          if (e.type === 'response.completed') id = e.response.id;
        }
      } else {
        const r = await client.responses.create({ model: 'mockclaude/ok', input });
        text = r.output_text;
        id = r.id;
      }
      expect(text).toBe(mockText(16));
      // the adapter's Anthropic body: developer → system, the user message's text
      expect(mock.stats.lastBody).toMatchObject({ model: 'mock-claude', system: 'Be terse.', messages: [{ role: 'user', content: 'hello claude' }] });
      const usage = { prompt_tokens: promptTokens([{ content: 'hello claude' }]) + countTokens('Be terse.'), completion_tokens: 16 };
      const requestId = `gen-${id.slice('resp_'.length)}`;
      await stack.waitSettled([requestId]);
      expect(await debit(requestId)).toMatchObject({ amount_micros: usageCostMicros(usage, PRICES), input_tokens: usage.prompt_tokens, output_tokens: 16 });
      expect(await balanceOf(t.tenantId)).toBe(1_000_000n - usageCostMicros(usage, PRICES));
    });
  }
});

describe('tools', () => {
  it('runs a function-call round trip: function_call, then its function_call_output by call_id, then the answer', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    const tools: OpenAI.Responses.Tool[] = [
      { type: 'function', name: 'get_weather', strict: false, parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
    ];
    const first = await client.responses.create({ model: 'mockvendor/loop', input: 'weather in SP?', tools, store: false });
    const call = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', arguments: '{"city":"mock"}', status: 'completed' });
    expect(first.usage?.output_tokens).toBe(MOCK_TOOL_COMPLETION_TOKENS);
    const firstUsage = mockUsage(mock.stats.lastBody!, MOCK_TOOL_COMPLETION_TOKENS);
    const second = await client.responses.create({
      model: 'mockvendor/loop',
      tools,
      store: false,
      input: [{ role: 'user', content: 'weather in SP?' }, call, { type: 'function_call_output', call_id: call.call_id, output: '25 °C' }],
    });
    expect(second.output_text).toBe(mockText(16));
    expect((mock.stats.lastBody as { messages: unknown[] }).messages).toEqual([
      { role: 'user', content: 'weather in SP?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"mock"}' } }],
      },
      { role: 'tool', tool_call_id: call.call_id, content: '25 °C' },
    ]);
    const secondUsage = mockUsage(mock.stats.lastBody!, 16);
    const ids = [first.id, second.id].map((id) => `gen-${id.slice('resp_'.length)}`);
    await stack.waitSettled(ids);
    expect((await debit(ids[0])).amount_micros).toBe(usageCostMicros(firstUsage, PRICES));
    expect((await debit(ids[1])).amount_micros).toBe(usageCostMicros(secondUsage, PRICES));
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - usageCostMicros(firstUsage, PRICES) - usageCostMicros(secondUsage, PRICES));
  });

  it('maps namespace and custom tools back exactly (namespace + name; custom_tool_call with its input), streamed', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    const tools = [
      {
        type: 'namespace',
        name: 'crm',
        description: 'The CRM.',
        tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: { who: { type: 'string' } } } }],
      },
      { type: 'custom', name: 'apply_patch', description: 'Edit files.' },
    ] as unknown as OpenAI.Responses.Tool[];
    const done: OpenAI.Responses.ResponseOutputItem[] = [];
    let last = '';
    for await (const e of await client.responses.create({ model: 'mockvendor/loop', input: 'look up ana', tools, stream: true, store: false })) {
      if (e.type === 'response.output_item.done') done.push(e.item);
      last = e.type;
    }
    expect(last).toBe('response.completed'); // tool calls end with response.completed too
    expect(done).toEqual([expect.objectContaining({ type: 'function_call', namespace: 'crm', name: 'lookup', arguments: '{"who":"mock"}' })]);
    expect((mock.stats.lastBody as { tools: Array<{ function: { name: string } }> }).tools.map((x) => x.function.name)).toEqual(['crm__lookup', 'apply_patch']);

    const custom = await client.responses.create({
      model: 'mockvendor/loop',
      input: 'patch it',
      tools,
      tool_choice: { type: 'custom', name: 'apply_patch' },
      store: false,
    });
    const ctc = custom.output[0] as OpenAI.Responses.ResponseCustomToolCall;
    expect(ctc).toMatchObject({ type: 'custom_tool_call', name: 'apply_patch', input: MOCK_LOOP_INPUT });
    const answer = await client.responses.create({
      model: 'mockvendor/loop',
      tools,
      store: false,
      input: [
        { role: 'user', content: 'patch it' },
        done[0] as OpenAI.Responses.ResponseFunctionToolCall,
        { type: 'function_call_output', call_id: (done[0] as OpenAI.Responses.ResponseFunctionToolCall).call_id, output: 'ana: found' },
        ctc,
        { type: 'custom_tool_call_output', call_id: ctc.call_id, output: 'Done!' },
      ],
    });
    expect(answer.output_text).toBe(mockText(16));
    const messages = (mock.stats.lastBody as { messages: Array<Record<string, unknown>> }).messages;
    expect(messages[1]).toMatchObject({ role: 'assistant', tool_calls: [{ function: { name: 'crm__lookup' } }] });
    expect(messages[3]).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: ctc.call_id, type: 'function', function: { name: 'apply_patch', arguments: JSON.stringify({ input: MOCK_LOOP_INPUT }) } }],
    });
    expect(messages[4]).toEqual({ role: 'tool', tool_call_id: ctc.call_id, content: 'Done!' });
  });

  it('leaves a hosted web_search tool out of what the vendor is offered (tool_choice auto)', async () => {
    const t = await stack.tenant('1.00');
    const r = await clientOf(t.key).responses.create({
      model: 'mockvendor/ok',
      input: 'news?',
      tools: [{ type: 'web_search' }, { type: 'function', name: 'noop', strict: false, parameters: { type: 'object', properties: {} } }],
      tool_choice: 'auto',
    });
    expect(r.status).toBe('completed');
    expect(r.tools.map((x) => x.type)).toEqual(['web_search', 'function']); // echoed as sent
    const sent = mock.stats.lastBody as { tools: unknown[] };
    expect(sent.tools).toEqual([{ type: 'function', function: { name: 'noop', strict: false, parameters: { type: 'object', properties: {} } } }]);
    expect(JSON.stringify(sent)).not.toContain('web_search');
  });

  it('refuses a tool_choice that forces a hosted tool with a 400 before anything is held', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { model: 'mockvendor/ok', input: 'x', tools: [{ type: 'web_search' }], tool_choice: { type: 'web_search_preview' } });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'unsupported_parameter', param: 'tool_choice' });
    expect(body.error.message).toContain("'web_search_preview'");
    const holds = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [t.tenantId]);
    expect(holds.rows[0].n).toBe(0);
    const debits = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId]);
    expect(debits.rows[0].n).toBe(0);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });

  it('sends text.format json_schema to the vendor as response_format', async () => {
    const t = await stack.tenant('1.00');
    const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'], additionalProperties: false };
    await clientOf(t.key).responses.create({
      model: 'mockvendor/ok',
      input: 'answer in JSON',
      text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } },
    });
    expect(mock.stats.lastBody!.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } });
  });
});

describe('stored responses', () => {
  it('continues a conversation with previous_response_id: the vendor gets the first exchange, billed exactly', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    const first = await client.responses.create({ model: 'mockvendor/ok', input: 'first question', instructions: 'Be kind.' });
    const firstUsage = mockUsage(mock.stats.lastBody!, 16);
    const second = await client.responses.create({ model: 'mockvendor/ok', input: 'second question', previous_response_id: first.id });
    // instructions are not carried over (OpenAI's rule); the first exchange is
    expect((mock.stats.lastBody as { messages: unknown[] }).messages).toEqual([
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: mockText(16) },
      { role: 'user', content: 'second question' },
    ]);
    expect(second.previous_response_id).toBe(first.id);
    const secondUsage = mockUsage(mock.stats.lastBody!, 16);
    expect(second.usage?.input_tokens).toBe(secondUsage.prompt_tokens);
    const ids = [first.id, second.id].map((id) => `gen-${id.slice('resp_'.length)}`);
    await stack.waitSettled(ids);
    const spent = usageCostMicros(firstUsage, PRICES) + usageCostMicros(secondUsage, PRICES);
    expect(BigInt((await debit(ids[0])).amount_micros) + BigInt((await debit(ids[1])).amount_micros)).toBe(spent);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - spent);

    // the conversation it answered, a page at a time (newest first by default)
    const page = await client.responses.inputItems.list(second.id, { limit: 2 });
    expect(page.data.map((x) => (x as { type: string }).type)).toEqual(['message', 'message']);
    expect(page.has_more).toBe(true);
    const all: unknown[] = [];
    for await (const item of client.responses.inputItems.list(second.id, { order: 'asc', limit: 1 })) all.push(item);
    expect(all).toMatchObject([
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'first question' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: mockText(16) }] },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'second question' }] },
    ]);

    // another tenant: 404 exactly like a missing response, for the follow-up and for the reads
    const other = await stack.tenant('1.00');
    const stranger = await post(other.key, { model: 'mockvendor/ok', input: 'x', previous_response_id: first.id });
    expect(stranger.status).toBe(404);
    const missing = await post(other.key, { model: 'mockvendor/ok', input: 'x', previous_response_id: 'resp_doesnotexist' });
    const [a, b] = [(await stranger.json()) as { error: { message: string } }, (await missing.json()) as { error: { message: string } }];
    expect({ ...a.error, message: a.error.message.replace(first.id, 'ID') }).toEqual({
      ...b.error,
      message: b.error.message.replace('resp_doesnotexist', 'ID'),
    });
    const read = await fetch(`${stack.baseUrl}/responses/${first.id}`, { headers: { authorization: `Bearer ${other.key}` } });
    expect(read.status).toBe(404);
    expect(await balanceOf(other.tenantId)).toBe(1_000_000n);
  });

  it('stores every response of a burst of 120 from one key (one insert per batch, no lock on the key or tenant rows): each readable as soon as its client has it, text exact', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    // quotes, backslashes, a NUL-free unicode mix: what the batch's arrays must carry unchanged. With the
    // responses table's foreign keys, such a burst deadlocked with the admissions beside it (migration 044)
    const inputs = Array.from({ length: 120 }, (_, i) => `pergunta ${i}: "aspas" \\ barra, ação ✓ {}[]`);
    const answers = await Promise.all(
      inputs.map(async (input) => {
        const r = await client.responses.create({ model: 'sim/echo', input });
        const read = await fetch(`${stack.baseUrl}/responses/${r.id}`, { headers: { authorization: `Bearer ${t.key}` } });
        expect(read.status).toBe(200);
        return { r, stored: (await read.json()) as { id: string; output_text?: string; output: Array<{ content: Array<{ text: string }> }> } };
      }),
    );
    for (const [i, { r, stored }] of answers.entries()) {
      expect(stored.id).toBe(r.id);
      expect(stored.output[0].content[0].text).toBe(inputs[i]);
      expect(r.output_text).toBe(inputs[i]);
    }
    const { rows } = await stack.db.query('select count(*)::int as n from responses where tenant_id = $1', [t.tenantId]);
    expect(rows[0].n).toBe(120);
  });

  it('stores nothing with store: false (previous_response_id → 404); DELETE removes a stored one', async () => {
    const t = await stack.tenant('1.00');
    const client = clientOf(t.key);
    const unstored = await client.responses.create({ model: 'sim/echo', input: 'not kept', store: false });
    const res = await post(t.key, { model: 'sim/echo', input: 'again', previous_response_id: unstored.id });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string; param: string } }).error).toMatchObject({
      code: 'previous_response_not_found',
      param: 'previous_response_id',
    });

    const kept = await client.responses.create({ model: 'sim/echo', input: 'kept' });
    const del = await fetch(`${stack.baseUrl}/responses/${kept.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${t.key}` } });
    expect(del.status).toBe(200);
    expect(await del.json()).toEqual({ id: kept.id, object: 'response', deleted: true });
    const again = await fetch(`${stack.baseUrl}/responses/${kept.id}`, { headers: { authorization: `Bearer ${t.key}` } });
    expect(again.status).toBe(404);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('response_not_found');
    const bad = await fetch(`${stack.baseUrl}/responses/${kept.id}/input_items?limit=500`, { headers: { authorization: `Bearer ${t.key}` } });
    expect(bad.status).toBe(400);
  });
});

describe('retention', () => {
  it('hides an expired response at once and metering deletes it', async () => {
    const t = await stack.tenant('1.00');
    const r = await clientOf(t.key).responses.create({ model: 'sim/echo', input: 'short-lived' });
    await stack.db.query("update responses set expires_at = now() - interval '1 second' where id = $1", [r.id]);
    const read = await fetch(`${stack.baseUrl}/responses/${r.id}`, { headers: { authorization: `Bearer ${t.key}` } });
    expect(read.status).toBe(404);
    const deadline = Date.now() + 5000; // the test stack's sweeper runs every 500 ms
    let left = 1;
    while (left > 0 && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 100));
      left = (await stack.db.query('select count(*)::int as n from responses where id = $1', [r.id])).rows[0].n;
    }
    expect(left).toBe(0);
  });
});

describe('the exchange, as for chat', () => {
  it('refuses a wrong key (401), a model outside the allowlist (403), an empty balance (402) in OpenAI shape', async () => {
    const wrong = await post('sk-catraca-not-a-real-key-000000000000', { model: 'sim/echo', input: 'x' });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { error: Record<string, unknown> }).error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    const limited = await stack.tenant('1.00', { models: ['sim/lorem'] });
    const forbidden = await post(limited.key, { model: 'sim/echo', input: 'x' });
    expect(forbidden.status).toBe(403);
    expect(((await forbidden.json()) as { error: Record<string, unknown> }).error).toMatchObject({
      type: 'permission_error',
      code: 'model_not_allowed',
      param: 'model',
    });
    const broke = await stack.tenant('0');
    const poor = await post(broke.key, { model: 'sim/echo', input: 'x' });
    expect(poor.status).toBe(402);
    expect(((await poor.json()) as { error: Record<string, unknown> }).error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_balance' });
    const unknown = await post(limited.key, { model: 'sim/lorem', input: 'x', frobnicate: true });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { error: Record<string, unknown> }).error).toMatchObject({
      message: 'Unrecognized request argument supplied: frobnicate',
    });
    const big = await post(limited.key, { model: 'sim/lorem', input: 'x', max_output_tokens: 1_000_000 });
    expect(big.status).toBe(400);
    expect(((await big.json()) as { error: Record<string, unknown> }).error).toMatchObject({ param: 'max_output_tokens' });
  });

  it('bills a client that leaves mid-stream by the cancel rule (prompt and what was generated)', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const input = 'tell me a long story';
    const res = await post(t.key, { model: 'sim/lorem', input, stream: true, sim: { tokens_per_second: 20, output_tokens: 200 } }, controller.signal);
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/response\.output_text\.delta\n/g) ?? []).length < 3) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await stack.waitSettled([requestId]);
    const row = await debit(requestId);
    const prompt = promptTokens([{ content: input }]);
    expect(row.outcome).toBe('cancelled');
    expect(row.input_tokens).toBe(prompt);
    expect(row.output_tokens).toBeGreaterThanOrEqual(3);
    expect(row.output_tokens).toBeLessThan(12);
    expect(row.amount_micros).toBe(costMicros(prompt, row.output_tokens, SIM_PRICES.lorem));
    await stack.waitNoHolds(t.tenantId);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - BigInt(row.amount_micros));
  });
});

/** A pass-through to the mock vendor that keeps each call's usage as the vendor reported it. */
async function usageRecorder(target: string): Promise<{ url: string; calls: BilledTokens[]; bodies: Array<Record<string, unknown>>; close: () => void }> {
  const calls: BilledTokens[] = [];
  const bodies: Array<Record<string, unknown>> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k))) as Record<
        string,
        string
      >;
      bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      const upstream = await fetch(`${target}${req.url!.replace(/^\/v1/, '')}`, { method: req.method, headers, body: Buffer.concat(chunks) });
      const text = await upstream.text();
      calls.push(reportedUsage(text));
      res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' });
      res.end(text);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, calls, bodies, close: () => server.close() };
}

/** The usage in a vendor's streamed answer: OpenAI's usage chunk, or Anthropic's message_start and message_delta. */
function reportedUsage(sse: string): BilledTokens {
  const datas = [...sse.matchAll(/^data: (\{.*\})$/gm)].map((m) => JSON.parse(m[1]));
  const openai = datas.find((d) => d.usage && d.object === 'chat.completion.chunk')?.usage;
  if (openai)
    return {
      prompt_tokens: openai.prompt_tokens,
      completion_tokens: openai.completion_tokens,
      cached_tokens: openai.prompt_tokens_details?.cached_tokens ?? 0,
    };
  const start = datas.find((d) => d.type === 'message_start')?.message.usage;
  const delta = datas.find((d) => d.type === 'message_delta')?.usage;
  return { prompt_tokens: start.input_tokens, completion_tokens: delta.output_tokens };
}

/** The tenant's debits once there are `n` of them (metering settles within milliseconds). */
async function settledDebits(tenantId: string, n: number): Promise<Array<{ amount_micros: string; route: string }>> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { rows } = await stack.db.query("select amount_micros, route from ledger where tenant_id = $1 and kind = 'debit' order by id", [tenantId]);
    if (rows.length >= n || Date.now() > deadline) {
      expect(rows).toHaveLength(n);
      return rows;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

// under CI a missing binary is a failure, never a silent skip
const codexMissing = !existsSync(CODEX);
if (codexMissing) console.warn(`${UNDER_CI ? 'failing' : 'skipping'} the Codex CLI tests: the Codex CLI is not installed (${CODEX})`);

describe.skipIf(codexMissing && !UNDER_CI)('the real Codex CLI (codex exec) on POST /v1/responses', () => {
  beforeAll(() => {
    if (codexMissing) throw new Error(`the Codex CLI tests cannot run under CI: ${CODEX} is not installed`);
  });
  for (const [model, vendor] of [
    ['mockvendor/ok', 'an OpenAI-compatible'],
    ['mockclaude/ok', 'an Anthropic-protocol'],
    ['mockvendor/loop', 'an OpenAI-compatible (a tool round trip)'],
  ] as const) {
    it(`answers "say hi" with ${vendor} mock vendor's text, every call billed what the vendor reported`, async () => {
      const recorder = await usageRecorder(mock.url);
      const recorded = `${model.replace('/', '-rec/')}`;
      const pool = model.startsWith('mockclaude') ? 'anthropic' : 'openai';
      const upstream = { 'mockvendor/ok': 'gpt-4o-mini', 'mockclaude/ok': 'mock-claude', 'mockvendor/loop': 'mock-tool-loop' }[model];
      await upsertModel(stack.db, {
        id: recorded,
        pool,
        upstream_model: upstream,
        base_url: recorder.url,
        api_key_env: 'MOCK_UPSTREAM_KEY',
        input_price: PRICES.input,
        output_price: PRICES.output,
        cached_input_price: PRICES.cachedInput,
      });
      const t = await stack.tenant('10.00');
      const home = mkdtempSync(join(tmpdir(), 'catraca-codex-'));
      try {
        mkdirSync(join(home, '.codex'));
        writeFileSync(
          join(home, '.codex', 'config.toml'),
          `model = "${recorded}"\nmodel_provider = "catraca"\n\n[model_providers.catraca]\nname = "catraca"\nbase_url = "${stack.baseUrl}"\nenv_key = "CATRACA_KEY"\nwire_api = "responses"\n`,
        );
        // asynchronously: the mock vendor and the recorder answer from this process
        const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
          const child = execFile(
            CODEX,
            ['exec', '--skip-git-repo-check', 'say hi'],
            { cwd: home, env: { PATH: process.env.PATH, HOME: home, CATRACA_KEY: t.key, NO_COLOR: '1' }, timeout: 90_000 },
            (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
          );
          child.stdin?.end();
        });
        expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
        expect(run.stdout).toContain(mockText(16));
        expect(recorder.calls.length).toBeGreaterThan(0);
        const rows = await settledDebits(t.tenantId, recorder.calls.length);
        const billed = rows.map((r) => BigInt(r.amount_micros)).sort();
        const reported = recorder.calls.map((u) => usageCostMicros(u, PRICES)).sort();
        expect(billed).toEqual(reported);
        for (const r of rows) expect(r.route).toBe('responses');
        const spent = reported.reduce((a, b) => a + b, 0n);
        expect(await balanceOf(t.tenantId)).toBe(10_000_000n - spent);
        if (process.env.CODEX_REPORT) console.log(JSON.stringify({ model, calls: recorder.calls, billed: billed.map(String), bodies: recorder.bodies }));
        if (model === 'mockvendor/loop') {
          // the call (of the first tool Codex offers), then the answer to the output Codex sent back
          expect(recorder.calls).toHaveLength(2);
          const [first, second] = recorder.bodies as Array<{ tools: Array<{ function: { name: string } }>; messages: Array<Record<string, unknown>> }>;
          const called = first.tools[0].function.name;
          const messages = second.messages;
          const call = messages[messages.length - 2] as { role: string; tool_calls: Array<{ id: string; function: { name: string } }> };
          expect(call).toMatchObject({ role: 'assistant', tool_calls: [{ function: { name: called } }] });
          expect(messages[messages.length - 1]).toMatchObject({ role: 'tool', tool_call_id: call.tool_calls[0].id });
        }
      } finally {
        recorder.close();
        rmSync(home, { recursive: true, force: true });
      }
    }, 120_000);
  }
});
