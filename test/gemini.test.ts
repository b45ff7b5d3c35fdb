import { type ApiError, FunctionCallingConfigMode, GoogleGenAI } from '@google/genai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUsageEntry } from '../bench/mock-upstream/anthropic.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS, mockText } from '../bench/mock-upstream/content.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { type Prices, usageCostMicros } from '../src/billing/money.ts';
import { setAlias, upsertModel } from '../src/db/models.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';

// The Gemini API inbound (/v1beta/models/{model}:generateContent, :streamGenerateContent,
// :countTokens) with Google's own SDK, @google/genai, unchanged: on an OpenAI-compatible mock
// vendor and an Anthropic-protocol one (translated to chat and back), a function-call round trip,
// token counts, and the refusals in Google's error shape. Every debit is the vendor's usage at
// the model's prices, to the micro-real; the balance is the grant minus the debits.

const UPSTREAM_KEY = 'sk-upstream-gemini-in-7a6b5c4d3e2f1a0b';
const PRICES: Prices = { input: 3_000_000n, output: 15_000_000n };

let stack: TestStack;
let mock: MockUpstream;
let origin: string;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'openai,anthropic' }));
  origin = stack.baseUrl.replace(/\/v1$/, '');
  const vendor = { base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', input_price: PRICES.input, output_price: PRICES.output };
  await upsertModel(stack.db, { id: 'gemin/openai', pool: 'openai', upstream_model: 'gpt-4o-mini', ...vendor });
  await upsertModel(stack.db, { id: 'gemin/agent', pool: 'openai', upstream_model: 'mock-agent', ...vendor });
  await upsertModel(stack.db, { id: 'gemin/reasoning', pool: 'openai', upstream_model: 'mock-reasoning', reasoning: true, ...vendor });
  await upsertModel(stack.db, { id: 'gemin/claude', pool: 'anthropic', upstream_model: 'mock-claude', max_output_tokens: 8192, ...vendor });
  // aliases are global in the shared test database: a name of its own (test/gemini-cli.test.ts aliases Gemini CLI's)
  await setAlias(stack.db, 'gemini-test-pro', 'gemin/openai');
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const genai = (key: string) => new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: origin } });

/** What the vendor reported for the calls after `from`, at PRICES. */
function vendorCost(from: number): { cost: bigint; calls: MockUsageEntry[] } {
  const calls = mock.stats.usages.slice(from);
  let cost = 0n;
  for (const e of calls) {
    if (e.api === 'messages') {
      const u = e.usage;
      cost += usageCostMicros(
        { prompt_tokens: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, completion_tokens: u.output_tokens },
        PRICES,
      );
    } else if (e.api === 'chat') cost += usageCostMicros(e.usage, PRICES);
  }
  return { cost, calls };
}

async function debits(keyId: string, n: number): Promise<{ total: bigint; models: string[]; routes: string[] }> {
  const deadline = Date.now() + 15_000;
  let rows: Array<{ amount_micros: string; model: string; route: string }> = [];
  while (Date.now() < deadline) {
    rows = (await stack.db.query("select amount_micros, model, route from ledger where key_id = $1 and kind = 'debit' order by id", [keyId])).rows;
    if (rows.length >= n) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return { total: rows.reduce((t, r) => t + BigInt(r.amount_micros), 0n), models: rows.map((r) => r.model), routes: rows.map((r) => r.route) };
}

/** The balance is the grant minus exactly `cost`, and no hold is left. */
async function expectBalance(tenantId: string, cost: bigint): Promise<void> {
  await stack.waitNoHolds(tenantId);
  const { rows } = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId]);
  expect(BigInt(rows[0].balance_micros)).toBe(5_000_000n - cost);
  expect(BigInt(rows[0].held_micros)).toBe(0n);
  const ledger = await stack.db.query(
    "select coalesce(sum(case when kind = 'debit' then -amount_micros else amount_micros end), 0)::bigint as net from ledger where tenant_id = $1",
    [tenantId],
  );
  expect(BigInt(ledger.rows[0].net)).toBe(BigInt(rows[0].balance_micros));
}

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

describe('the Gemini API inbound with @google/genai', () => {
  it('generateContent on an OpenAI-compatible model: the vendor text, its usage, billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const r = await genai(t.key).models.generateContent({
      model: 'gemin/openai',
      contents: 'say hi',
      config: { systemInstruction: 'be brief', temperature: 0.5, maxOutputTokens: 100 },
    });
    expect(r.text).toBe(mockText(16));
    expect(r.candidates?.[0].finishReason).toBe('STOP');
    const { cost, calls } = vendorCost(from);
    expect(calls).toHaveLength(1);
    const u = (calls[0] as { usage: { prompt_tokens: number } }).usage;
    expect(r.usageMetadata).toEqual({ promptTokenCount: u.prompt_tokens, candidatesTokenCount: 16, totalTokenCount: u.prompt_tokens + 16 });
    const sent = mock.stats.lastBody as { messages: unknown[]; temperature: number; max_tokens: number };
    expect(sent.messages).toEqual([
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'say hi' },
    ]);
    expect(sent).toMatchObject({ temperature: 0.5, max_tokens: 100 });
    const d = await debits(t.keyId, 1);
    expect(d).toEqual({ total: cost, models: ['gemin/openai'], routes: ['gemini'] });
    await expectBalance(t.tenantId, cost);
  });

  it('generateContentStream on an Anthropic-protocol model: the pieces, the last with finishReason and usage', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const stream = await genai(t.key).models.generateContentStream({ model: 'gemin/claude', contents: [{ role: 'user', parts: [{ text: 'say hi' }] }] });
    let text = '';
    let last: Awaited<ReturnType<typeof stream.next>>['value'];
    for await (const chunk of stream) {
      text += chunk.text ?? '';
      last = chunk;
    }
    expect(text).toBe(mockText(16));
    const { cost, calls } = vendorCost(from);
    expect(calls.map((c) => c.api)).toEqual(['messages']);
    const u = (calls[0] as Extract<MockUsageEntry, { api: 'messages' }>).usage;
    expect(last?.candidates?.[0].finishReason).toBe('STOP');
    expect(last?.usageMetadata).toEqual({
      promptTokenCount: u.input_tokens,
      candidatesTokenCount: u.output_tokens,
      totalTokenCount: u.input_tokens + u.output_tokens,
    });
    const d = await debits(t.keyId, 1);
    expect(d.total).toBe(cost);
    expect(d.models).toEqual(['gemin/claude']);
    await expectBalance(t.tenantId, cost);
  });

  it('a function-call round trip: the call as functionCall, its functionResponse answered; both calls billed exactly', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const ai = genai(t.key);
    const tools = [
      {
        functionDeclarations: [
          {
            name: 'get_weather',
            description: 'The weather in a city',
            parameters: { type: 'OBJECT', properties: { city: { type: 'STRING' }, unit: { type: 'STRING' } }, required: ['city'] },
          },
        ],
      },
    ] as never;
    const question = { role: 'user', parts: [{ text: "what's the weather in São Paulo?" }] };
    const first = await ai.models.generateContent({
      model: 'gemin/agent',
      contents: [question],
      config: { tools, toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.AUTO } } },
    });
    expect(first.functionCalls).toEqual([{ id: MOCK_TOOL_CALL.id, name: 'get_weather', args: JSON.parse(MOCK_TOOL_CALL.arguments) }]);
    const sentTools = (mock.stats.lastBody as { tools: unknown[]; tool_choice: unknown }).tools;
    expect(sentTools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string' } }, required: ['city'] },
        },
      },
    ]);
    const call = first.candidates![0].content!;
    const second = await ai.models.generateContent({
      model: 'gemin/agent',
      contents: [
        question,
        call,
        { role: 'user', parts: [{ functionResponse: { id: MOCK_TOOL_CALL.id, name: 'get_weather', response: { temperature: 31 } } }] },
      ],
      config: { tools },
    });
    expect(second.text).toBe(mockText(16));
    const sent = mock.stats.lastBody as { messages: Array<Record<string, unknown>> };
    expect(sent.messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: MOCK_TOOL_CALL.id, type: 'function', function: { name: 'get_weather', arguments: MOCK_TOOL_CALL.arguments } }],
      },
      { role: 'tool', tool_call_id: MOCK_TOOL_CALL.id, content: '{"temperature":31}' },
    ]);
    const { cost, calls } = vendorCost(from);
    expect(calls).toHaveLength(2);
    expect((calls[0] as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(MOCK_TOOL_COMPLETION_TOKENS);
    const d = await debits(t.keyId, 2);
    expect(d.total).toBe(cost);
    await expectBalance(t.tenantId, cost);
  });

  it('thinking shown as thought parts when asked, counted in thoughtsTokenCount', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const r = await genai(t.key).models.generateContent({
      model: 'gemin/reasoning',
      contents: 'think',
      config: { thinkingConfig: { includeThoughts: true, thinkingBudget: 2048 } },
    });
    const parts = r.candidates![0].content!.parts!;
    expect(parts[0]).toEqual({ text: MOCK_REASONING.join(''), thought: true });
    expect(r.text).toBe(mockText(16));
    expect((mock.stats.lastBody as { reasoning_effort: string }).reasoning_effort).toBe('low');
    const u = (vendorCost(from).calls[0] as { usage: { prompt_tokens: number } }).usage;
    expect(r.usageMetadata).toEqual({
      promptTokenCount: u.prompt_tokens,
      candidatesTokenCount: 16,
      thoughtsTokenCount: MOCK_REASONING.length,
      totalTokenCount: u.prompt_tokens + 16 + MOCK_REASONING.length,
    });
    const d = await debits(t.keyId, 1);
    expect(d.total).toBe(vendorCost(from).cost);
    await expectBalance(t.tenantId, d.total);
  });

  it('countTokens: the Anthropic vendor counts, nothing is billed', async () => {
    const t = await stack.tenant('5.00');
    const from = mock.stats.usages.length;
    const r = await genai(t.key).models.countTokens({ model: 'gemin/claude', contents: 'how many tokens is this?' });
    const counted = mock.stats.usages.slice(from);
    expect(counted).toHaveLength(1);
    expect(counted[0]).toMatchObject({ api: 'count_tokens', model: 'mock-claude' });
    expect(r.totalTokens).toBe((counted[0] as Extract<MockUsageEntry, { api: 'count_tokens' }>).input_tokens);
    const r2 = await genai(t.key).models.countTokens({ model: 'gemin/openai', contents: 'how many tokens is this?' });
    expect(r2.totalTokens).toBeGreaterThan(0);
    await expectBalance(t.tenantId, 0n);
    expect((await debits(t.keyId, 0)).total).toBe(0n);
  });

  it("an alias of Gemini CLI's built-in model name, the key as ?key= or Bearer, the catalog in Gemini's shape", async () => {
    const t = await stack.tenant('5.00');
    const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] };
    const byQuery = await post(`/v1beta/models/gemini-test-pro:generateContent?key=${t.key}`, body);
    expect(byQuery.status).toBe(200);
    expect(((await byQuery.json()) as { modelVersion: string }).modelVersion).toBe('gemin/openai');
    const byBearer = await post('/v1beta/models/gemin/openai:streamGenerateContent?alt=sse', body, { authorization: `Bearer ${t.key}` });
    expect(byBearer.status).toBe(200);
    expect(byBearer.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const events = (await byBearer.text())
      .split('\r\n\r\n')
      .filter(Boolean)
      .map((e) => JSON.parse(e.replace(/^data: /, '')) as { candidates: Array<{ content: { parts: Array<{ text: string }> }; finishReason?: string }> });
    expect(events.map((e) => e.candidates[0].content.parts[0].text).join('')).toBe(mockText(16));
    expect(events.map((e) => e.candidates[0].finishReason ?? null).at(-1)).toBe('STOP');
    expect(events.slice(0, -1).every((e) => e.candidates[0].finishReason === undefined)).toBe(true);
    const noSse = await post('/v1beta/models/gemin/openai:streamGenerateContent', body, { 'x-goog-api-key': t.key });
    expect(noSse.status).toBe(400);
    expect(((await noSse.json()) as { error: { status: string } }).error.status).toBe('INVALID_ARGUMENT');
    const list = (await (await fetch(`${origin}/v1beta/models`)).json()) as { models: Array<{ name: string; baseModelId: string }> };
    expect(list.models.find((m) => m.name === 'models/gemini-test-pro')).toMatchObject({ baseModelId: 'gemin/openai' });
    const one = await fetch(`${origin}/v1beta/models/gemin/claude`);
    expect(await one.json()).toMatchObject({
      name: 'models/gemin/claude',
      outputTokenLimit: 8192,
      supportedGenerationMethods: ['generateContent', 'countTokens', 'streamGenerateContent'],
    });
    const missing = await fetch(`${origin}/v1beta/models/nope/nothing`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: { code: 404, message: 'The model "nope/nothing" does not exist.', status: 'NOT_FOUND' } });
    const control = await fetch(`${origin}/v1beta/models/a%00b`);
    expect(control.status).toBe(404);
    const posted = await post('/v1beta/models/a%00b:generateContent', body, { 'x-goog-api-key': t.key });
    expect(posted.status).toBe(404);
    expect(((await posted.json()) as { error: { status: string } }).error.status).toBe('NOT_FOUND');
    const method = await post('/v1beta/models/gemin/openai:embedContent', body, { 'x-goog-api-key': t.key });
    expect(method.status).toBe(404);
    const wrongVerb = await fetch(`${origin}/v1beta/models`, { method: 'DELETE' });
    expect(wrongVerb.status).toBe(405);
    expect(await wrongVerb.json()).toEqual({ error: { code: 405, message: 'Method DELETE is not allowed on /v1beta/models.', status: 'UNIMPLEMENTED' } });
    await stack.waitNoHolds(t.tenantId);
  });
});

describe("refusals in Google's error shape, nothing charged", () => {
  const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] };

  it('a wrong key: 400 INVALID_ARGUMENT, as Google answers it', async () => {
    const r = await post('/v1beta/models/gemin/openai:generateContent', body, { 'x-goog-api-key': 'sk-cat-not-a-real-key-0000000000000000' });
    expect(r.status).toBe(400);
    expect(await r.json()).toEqual({ error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT' } });
    const sdk = await genai('sk-cat-not-a-real-key-0000000000000000')
      .models.generateContent({ model: 'gemin/openai', contents: 'hi' })
      .catch((e: ApiError) => e);
    expect((sdk as ApiError).status).toBe(400);
  });

  it('a model outside the key allowlist: 403 PERMISSION_DENIED', async () => {
    const t = await stack.tenant('5.00', { models: ['gemin/claude'] });
    const r = await post('/v1beta/models/gemin/openai:generateContent', body, { 'x-goog-api-key': t.key });
    expect(r.status).toBe(403);
    expect(await r.json()).toEqual({ error: { code: 403, message: 'This API key is not allowed to use model "gemin/openai".', status: 'PERMISSION_DENIED' } });
    await expectBalance(t.tenantId, 0n);
  });

  it('an empty balance: 402 RESOURCE_EXHAUSTED naming the credits', async () => {
    const t = await stack.tenant('0.00');
    const r = await post('/v1beta/models/gemin/openai:generateContent', body, { 'x-goog-api-key': t.key });
    expect(r.status).toBe(402);
    const e = ((await r.json()) as { error: { code: number; status: string; message: string } }).error;
    expect(e.code).toBe(402);
    expect(e.status).toBe('RESOURCE_EXHAUSTED');
    expect(e.message).toMatch(/^This request requires more credits/);
    const { rows } = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [t.tenantId]);
    expect(rows[0]).toEqual({ balance_micros: 0n, held_micros: 0n });
  });

  it('safety thresholds nobody here applies, server tools and cached contents: 400 naming the field', async () => {
    const t = await stack.tenant('5.00');
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ safetySettings: [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_LOW_AND_ABOVE' }] }, 'safetySettings[0].threshold'],
      [{ tools: [{ googleSearch: {} }] }, 'tools[0].googleSearch'],
      [{ cachedContent: 'cachedContents/abc' }, 'cachedContent'],
    ];
    for (const [extra, field] of cases) {
      const r = await post('/v1beta/models/gemin/openai:generateContent', { ...body, ...extra }, { 'x-goog-api-key': t.key });
      expect(r.status).toBe(400);
      const e = ((await r.json()) as { error: { status: string; message: string } }).error;
      expect(e.status).toBe('INVALID_ARGUMENT');
      expect(e.message.startsWith(`${field}: `)).toBe(true);
    }
    const lenient = await post(
      '/v1beta/models/gemin/openai:generateContent',
      { ...body, safetySettings: [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_NONE' }] },
      { 'x-goog-api-key': t.key },
    );
    expect(lenient.status).toBe(200);
    const d = await debits(t.keyId, 1);
    await expectBalance(t.tenantId, d.total);
  });
});
