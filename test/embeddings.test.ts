import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MOCK_EMBEDDING_DIMENSIONS } from '../bench/mock-upstream/openai-embeddings.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { parseBrl, usageCostMicros } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';
import { embeddingTokens, SIM_EMBEDDING_DIMENSIONS, simEmbedding } from '../src/providers/sim/embed.ts';
import { SIM_CATALOG } from '../src/stack/seed.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';

// POST /v1/embeddings through the whole path (front door → NATS → worker → vendor) with the openai
// SDK: the built-in sim/embed and an OpenAI-compatible mock embedding model.

const UPSTREAM_KEY = 'sk-upstream-embed-0a1b2c3d4e5f60718293a4b5c6d7e8f9';
const SIM_EMBED = SIM_CATALOG.find((m) => m.id === 'sim/embed')!;
const SIM_PRICES = { input: SIM_EMBED.input_price, output: SIM_EMBED.output_price };
const MOCK_PRICES = { input: 130_000n, output: 0n }; // R$ 0,13 per 1M tokens

let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'sim,openai' }));
  await upsertModel(stack.db, SIM_EMBED);
  for (const [id, upstream] of Object.entries({ small: 'text-embedding-3-small', e500: 'mock-embed-500', e429: 'mock-embed-429' })) {
    await upsertModel(stack.db, {
      id: `mockembed/${id}`,
      pool: 'openai',
      kind: 'embedding',
      upstream_model: upstream,
      base_url: mock.url,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: MOCK_PRICES.input,
      output_price: MOCK_PRICES.output,
      context_length: 8192,
    });
  }
  // a catalog row `model set` refuses (an Anthropic-protocol embedding model): the door must too
  await upsertModel(stack.db, {
    id: 'mockembed/claude',
    pool: 'anthropic',
    protocol: 'anthropic',
    kind: 'embedding',
    upstream_model: 'mock-claude',
    input_price: 1n,
    output_price: 1n,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const ledgerRow = async (requestId: string) => (await stack.db.query('select * from ledger where request_id = $1', [requestId])).rows[0];
const balance = async (tenantId: string) =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros as bigint;
const ledgerCount = async (tenantId: string) =>
  (await stack.db.query(`select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'`, [tenantId])).rows[0].n as number;
const holdCount = async (tenantId: string) =>
  (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n as number;
const post = (key: string, path: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** Settles the request and checks the one debit: exactly the vendor's prompt tokens at the model's prices, taken from the balance. */
async function expectDebit(requestId: string, tenantId: string, promptTokens: number, prices: { input: bigint; output: bigint }) {
  await stack.waitSettled([requestId]);
  const expected = usageCostMicros({ prompt_tokens: promptTokens, completion_tokens: 0 }, prices);
  expect(expected).toBeGreaterThan(0n);
  const row = await ledgerRow(requestId);
  expect(row).toMatchObject({ input_tokens: promptTokens, output_tokens: 0, estimated: false, outcome: 'completed', route: 'embeddings' });
  expect(row.amount_micros).toBe(expected);
  expect(await balance(tenantId)).toBe(parseBrl('1.00') - expected);
  await stack.waitNoHolds(tenantId);
}

describe('POST /v1/embeddings with the openai SDK', () => {
  it("sim/embed, the SDK's default (base64, decoded by the SDK): the sim's deterministic vectors, billed on its prompt tokens", async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const input = 'The quick brown fox jumped over the lazy dog';
    const { data, response } = await client.embeddings.create({ model: 'sim/embed', input }).withResponse();
    expect(data.object).toBe('list');
    expect(data.model).toBe('sim/embed');
    expect(data.data).toHaveLength(1);
    expect(data.data[0].embedding).toEqual(Array.from(simEmbedding('embed', input, SIM_EMBEDDING_DIMENSIONS)));
    expect(data.usage).toMatchObject({ prompt_tokens: 9, total_tokens: 9 });
    expect(embeddingTokens(input)).toBe(9);
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, 9, SIM_PRICES);
  });

  it('sim/embed, encoding_format float, an array input and dimensions', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const inputs = ['first text', 'second, longer text here', 'olá'];
    const { data, response } = await client.embeddings.create({ model: 'sim/embed', input: inputs, encoding_format: 'float', dimensions: 32 }).withResponse();
    expect(data.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(data.data.map((d) => d.embedding)).toEqual(inputs.map((s) => Array.from(simEmbedding('embed', s, 32))));
    const tokens = 2 + 4 + 1;
    expect(data.usage.prompt_tokens).toBe(tokens);
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, tokens, SIM_PRICES);
  });

  it('an OpenAI-compatible vendor, SDK default: the vendor gets exactly the allowlisted fields, its base64 is relayed byte for byte', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const inputs = ['alpha beta', 'gamma'];
    const { data, response } = await client.embeddings.create({ model: 'mockembed/small', input: inputs, dimensions: 64, user: 'end-user-7' }).withResponse();
    expect(mock.stats.lastPath).toBe('/v1/embeddings');
    expect(mock.stats.lastAuthorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    expect(mock.stats.lastBody).toEqual({ model: 'text-embedding-3-small', input: inputs, encoding_format: 'base64', dimensions: 64, user: 'end-user-7' });
    expect(data.model).toBe('mockembed/small');
    expect(data.data.map((d) => d.embedding)).toEqual(inputs.map((s) => Array.from(simEmbedding('text-embedding-3-small', s, 64))));
    expect(data.usage.prompt_tokens).toBe(3);
    const requestId = response.headers.get('x-request-id')!;
    await expectDebit(requestId, t.tenantId, 3, MOCK_PRICES);
    expect((await ledgerRow(requestId)).end_user).toBe('end-user-7');
    const generation = await fetch(`${stack.baseUrl}/generation?id=${requestId}`, { headers: { authorization: `Bearer ${t.key}` } });
    expect((await generation.json()).data).toMatchObject({
      id: requestId,
      model: 'mockembed/small',
      tokens_prompt: 3,
      tokens_completion: 0,
      api_type: 'embeddings',
      user: 'end-user-7',
      total_cost: Number(usageCostMicros({ prompt_tokens: 3, completion_tokens: 0 }, MOCK_PRICES)) / 1e6,
    });
  });

  it('an OpenAI-compatible vendor, encoding_format float, token-id inputs (one token each): the floats the vendor wrote', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const inputs = [
      [15339, 1917],
      [9906, 11, 1917, 0],
    ];
    const { data, response } = await client.embeddings.create({ model: 'mockembed/small', input: inputs, encoding_format: 'float' }).withResponse();
    expect(mock.stats.lastBody).toEqual({ model: 'text-embedding-3-small', input: inputs, encoding_format: 'float' });
    data.data.forEach((d, i) => {
      expect(d.embedding).toHaveLength(MOCK_EMBEDDING_DIMENSIONS);
      // the vendor writes each float32 as its shortest decimal: read back as float32 it is the vector
      expect(d.embedding.map(Math.fround)).toEqual(Array.from(simEmbedding('text-embedding-3-small', inputs[i], MOCK_EMBEDDING_DIMENSIONS)));
    });
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, 6, MOCK_PRICES);
  });

  it("the raw answer: OpenAI's shape, the vendor's base64 string unchanged, usage with its cost", async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, '/embeddings', { model: 'mockembed/small', input: 'hi there', encoding_format: 'base64', dimensions: 3 });
    expect(res.status).toBe(200);
    const body = await res.json();
    const v = simEmbedding('text-embedding-3-small', 'hi there', 3);
    const cost = usageCostMicros({ prompt_tokens: 2, completion_tokens: 0 }, MOCK_PRICES);
    expect(body).toEqual({
      object: 'list',
      data: [{ object: 'embedding', index: 0, embedding: Buffer.from(v.buffer).toString('base64') }],
      model: 'mockembed/small',
      usage: { prompt_tokens: 2, total_tokens: 2, cost: Number(cost) / 1e6 },
    });
    await expectDebit(res.headers.get('x-request-id')!, t.tenantId, 2, MOCK_PRICES);
  });
});

describe('POST /v1/embeddings refusals', () => {
  it('a chat model on /embeddings: 400 wrong_model_kind, nothing held or debited', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    await expect(client.embeddings.create({ model: 'sim/echo', input: 'x' })).rejects.toMatchObject({
      status: 400,
      code: 'wrong_model_kind',
      param: 'model',
      message: expect.stringContaining('The model "sim/echo" is a chat model: /v1/embeddings needs an embedding model.'),
    });
    expect([await holdCount(t.tenantId), await ledgerCount(t.tenantId), await balance(t.tenantId)]).toEqual([0, 0, parseBrl('1.00')]);
  });

  it('an embedding model on /chat/completions and /completions: 400 wrong_model_kind, nothing held', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    await expect(client.chat.completions.create({ model: 'sim/embed', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({
      status: 400,
      code: 'wrong_model_kind',
      message: expect.stringContaining('The model "sim/embed" is an embedding model: use it with /v1/embeddings, not /v1/chat/completions.'),
    });
    await expect(client.completions.create({ model: 'mockembed/small', prompt: 'x' })).rejects.toMatchObject({ status: 400, code: 'wrong_model_kind' });
    expect([await holdCount(t.tenantId), await ledgerCount(t.tenantId), await balance(t.tenantId)]).toEqual([0, 0, parseBrl('1.00')]);
  });

  it('a vendor 500 → 502, a vendor 429 → 429 with retry-after; nothing debited', async () => {
    const t = await stack.tenant('1.00');
    const failed = await post(t.key, '/embeddings', { model: 'mockembed/e500', input: 'x' });
    expect(failed.status).toBe(502);
    expect((await failed.json()).error).toMatchObject({ type: 'upstream_error', code: 'upstream_error' });
    const limited = await post(t.key, '/embeddings', { model: 'mockembed/e429', input: 'x' });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    expect((await limited.json()).error).toMatchObject({ type: 'rate_limit_error', code: 'upstream_rate_limited' });
    const ids = [failed.headers.get('x-request-id')!, limited.headers.get('x-request-id')!];
    await stack.waitSettled(ids);
    for (const id of ids) expect((await ledgerRow(id)).amount_micros).toBe(0n);
    expect(await balance(t.tenantId)).toBe(parseBrl('1.00'));
    await stack.waitNoHolds(t.tenantId);
  });

  it('bad input: OpenAI-style 400s naming the field, nothing held; `stream` is not an embeddings parameter', async () => {
    const t = await stack.tenant('1.00');
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ input: '' }, 'input', "Invalid value for 'input': must not be an empty string."],
      [{ input: ['ok', ''] }, 'input[1]', "Invalid value for 'input[1]': must not be an empty string."],
      [{ input: Array(2049).fill('x') }, 'input', "Invalid value for 'input': at most 2048 inputs per request, got 2049."],
      [{ input: 'x', dimensions: -1 }, 'dimensions', "Invalid value for 'dimensions': must be a positive integer"],
      [{ input: 'x', stream: true }, 'stream', 'Unrecognized request argument supplied: stream'],
      [
        { input: Array(8193).fill(1) },
        'input',
        "This model's maximum context length is 8192 tokens, however you requested 8193 tokens in 'input'. Please reduce your input.",
      ],
    ];
    for (const [body, param, message] of cases) {
      const res = await post(t.key, '/embeddings', { model: 'sim/embed', ...body });
      expect([res.status, (await res.json()).error]).toEqual([400, { type: 'invalid_request_error', code: expect.any(String), param, message }]);
    }
    const claude = await post(t.key, '/embeddings', { model: 'mockembed/claude', input: 'x' });
    expect([claude.status, (await claude.json()).error.param]).toEqual([400, 'model']);
    expect([await holdCount(t.tenantId), await ledgerCount(t.tenantId)]).toEqual([0, 0]);
  });

  it("wrong key 401, a model outside the key's allowlist 403, an empty balance 402: in OpenAI's shape", async () => {
    const bad = new OpenAI({ baseURL: stack.baseUrl, apiKey: 'sk-cat-v1-nope', maxRetries: 0 });
    await expect(bad.embeddings.create({ model: 'sim/embed', input: 'x' })).rejects.toMatchObject({
      status: 401,
      code: 'invalid_api_key',
      type: 'authentication_error',
    });
    const limited = await stack.tenant('1.00', { models: ['sim/echo'] });
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: limited.key, maxRetries: 0 });
    await expect(client.embeddings.create({ model: 'sim/embed', input: 'x' })).rejects.toMatchObject({
      status: 403,
      code: 'model_not_allowed',
      type: 'permission_error',
      param: 'model',
    });
    const broke = await stack.tenant('0');
    const poor = new OpenAI({ baseURL: stack.baseUrl, apiKey: broke.key, maxRetries: 0 });
    await expect(poor.embeddings.create({ model: 'sim/embed', input: 'x' })).rejects.toMatchObject({
      status: 402,
      code: 'insufficient_balance',
      type: 'insufficient_quota',
      message: expect.stringContaining('its input alone can cost up to R$ 0.000001'),
    });
    expect(await ledgerCount(broke.tenantId)).toBe(0);
  });
});
