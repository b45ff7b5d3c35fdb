import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startStack, type TestStack } from './helpers/stack.ts';
import { mockPromptTokens, startMockUpstream, type MockUpstream } from '../bench/mock-upstream/server.ts';
import { getModel, upsertModel, type ModelInput } from '../src/db/models.ts';
import { costMicros } from '../src/billing/money.ts';
import { fingerprint } from '../src/catalog/catalog.ts';
import { decodeJson, encode, type Job } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { estimatePromptTokens } from '../src/providers/shared/estimate.ts';

// Strict prepaid against a vendor that bills the way real vendors do (the mock bills each image
// like gpt-4o-mini at high detail, tools as rendered text, reasoning as output): the sum of what
// the vendor bills for the requests we admit never exceeds what the tenant (and the key's limit)
// could pay when they were admitted, and no settlement records a shortfall.
const UPSTREAM_KEY = 'sk-upstream-0a1b2c3d4e5f60718293a4b5c6d7e8f9';
const VISION = { input: 3_700_000n, output: 14_800_000n }; // R$ 3,70 / R$ 14,80 per 1M tokens
const IMAGE = { type: 'image_url', image_url: { url: 'https://img.example/photo.png', detail: 'high' } };

let stack: TestStack;
let mock: MockUpstream;

const model = (m: Partial<ModelInput> & { id: string }) =>
  upsertModel(stack.db, {
    pool: 'openai',
    upstream_model: 'gpt-4o-mini',
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: VISION.input,
    output_price: VISION.output,
    ...m,
  });

beforeAll(async () => {
  mock = await startMockUpstream({ outputTokens: 16 });
  stack = await startStack({ gateways: 2, workers: 1, pools: 'openai', env: { MOCK_UPSTREAM_KEY: UPSTREAM_KEY, WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY' } });
  await model({ id: 'vision/mini', input_modalities: ['text', 'image'], image_input_tokens: 25_600 });
  await model({ id: 'vision/nobound', input_modalities: ['text', 'image'], image_input_tokens: null, context_length: 128_000 });
  await model({ id: 'text/mini', input_price: 1_000_000n, output_price: 1_000_000n }); // 1 µBRL per token either way
  await model({ id: 'text/slow', upstream_model: 'mock-slow', input_price: 1_000_000n, output_price: 1_000_000n });
  await model({ id: 'text/extra', extra_params: ['mock'], input_price: 1_000_000n, output_price: 1_000_000n });
  await model({ id: 'leak/env', api_key_env: 'DATABASE_URL' });
}, 60000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const post = (key: string, body: Record<string, unknown>, door = 0) =>
  fetch(`${stack.urlOf(stack.gateways[door % stack.gateways.length])}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const holdsOf = async (tenantId: string) => (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n;
const balanceOf = async (tenantId: string): Promise<bigint> =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros;
const debitsOf = async (tenantId: string) =>
  (
    await stack.db.query(
      `select request_id, amount_micros, cost_micros, input_tokens, output_tokens, note from ledger where tenant_id = $1 and kind = 'debit' order by id`,
      [tenantId],
    )
  ).rows;

async function expectLedgerOk(tenantId: string) {
  await stack.waitNoHolds(tenantId);
  const check = await ledgerCheck(stack.db, { tenantId });
  expect(check).toEqual({ ok: true, tenants_checked: 1, mismatches: [] });
}

const imageRequest = (modelId: string) => ({
  model: modelId,
  max_tokens: 10,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' }, IMAGE] }],
});
/** What the vendor bills for imageRequest(): the mock's prompt count (25 501 per image) and 10 output tokens. */
const vendorCostOfImageRequest = () => costMicros(mockPromptTokens(imageRequest('x')), 10, VISION);

describe('holds are a true upper bound of what the vendor bills', () => {
  it('images: 8 concurrent image requests on R$ 0,05 are all refused (each can cost ~R$ 0,09)', async () => {
    const t = await stack.tenant('0.05');
    const res = await Promise.all(Array.from({ length: 8 }, (_, i) => post(t.key, imageRequest('vision/mini'), i)));
    expect(res.map((r) => r.status)).toEqual(Array(8).fill(402));
    expect((await res[0].json()).error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_balance' });
    expect(mock.stats.requests).toBe(0);
    expect(await balanceOf(t.tenantId)).toBe(50_000n);
    await expectLedgerOk(t.tenantId);
  });

  it('images across two front doors: what the vendor bills for the admitted requests fits the balance, no shortfall', { timeout: 30000 }, async () => {
    const t = await stack.tenant('0.50');
    const before = mock.stats.requests;
    const res = await Promise.all(Array.from({ length: 8 }, (_, i) => post(t.key, imageRequest('vision/mini'), i)));
    const statuses = res.map((r) => r.status).sort();
    // hold = (bound of the text + 25 600 for the image) × R$ 3,70/M + 10 × R$ 14,80/M ≈ R$ 0,0950: 5 fit in R$ 0,50
    expect(statuses).toEqual([200, 200, 200, 200, 200, 402, 402, 402]);
    const ids = res.filter((r) => r.status === 200).map((r) => r.headers.get('x-request-id')!);
    await stack.waitSettled(ids);
    expect(mock.stats.requests - before).toBe(5);
    const debits = await debitsOf(t.tenantId);
    expect(debits).toHaveLength(5);
    const vendorCost = vendorCostOfImageRequest();
    for (const d of debits) {
      expect(d.input_tokens).toBe(mockPromptTokens(imageRequest('x'))); // the vendor's count, images included
      expect([d.amount_micros, d.cost_micros, d.note]).toEqual([vendorCost, vendorCost, null]);
    }
    expect(await balanceOf(t.tenantId)).toBe(500_000n - 5n * vendorCost);
    await expectLedgerOk(t.tenantId);
  });

  it("images against a key's BRL limit: the key cannot be pushed past it", { timeout: 30000 }, async () => {
    const t = await stack.tenant('10.00', { limitMicros: 100_000n }); // R$ 0,10 for this key
    const res = await Promise.all(Array.from({ length: 4 }, (_, i) => post(t.key, imageRequest('vision/mini'), i)));
    expect(res.map((r) => r.status).sort()).toEqual([200, 402, 402, 402]);
    expect((await res.find((r) => r.status === 402)!.json()).error.code).toBe('key_limit_exceeded');
    await stack.waitSettled([res.find((r) => r.status === 200)!.headers.get('x-request-id')!]);
    const { rows } = await stack.db.query('select usage_micros from api_keys where id = $1', [t.keyId]);
    expect(rows[0].usage_micros).toBe(vendorCostOfImageRequest());
    await expectLedgerOk(t.tenantId);
  });

  it('an image on a model without a per-image bound holds the whole context window', { timeout: 30000 }, async () => {
    const t = await stack.tenant('0.50');
    const res = await Promise.all(Array.from({ length: 3 }, (_, i) => post(t.key, imageRequest('vision/nobound'), i)));
    // 128 000 × R$ 3,70/M = R$ 0,4736 per request: exactly one fits
    expect(res.map((r) => r.status).sort()).toEqual([200, 402, 402]);
    await stack.waitSettled([res.find((r) => r.status === 200)!.headers.get('x-request-id')!]);
    expect(await balanceOf(t.tenantId)).toBe(500_000n - vendorCostOfImageRequest());
    await expectLedgerOk(t.tenantId);
  });

  it('tools, legacy functions and response_format schemas count toward the hold', async () => {
    const t = await stack.tenant('0.001'); // 1 000 µBRL; text/mini costs 1 µBRL per token
    const schema = {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`field_${i}`, { type: 'string', description: 'a value the model must fill in' }])),
    };
    const base = { model: 'text/mini', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] };
    expect(JSON.stringify(schema).length).toBeGreaterThan(1000);
    for (const extra of [
      { tools: [{ type: 'function', function: { name: 'fill', parameters: schema } }] },
      { functions: [{ name: 'fill', parameters: schema }] },
      { response_format: { type: 'json_schema', json_schema: { name: 'form', schema } } },
    ]) {
      const res = await post(t.key, { ...base, ...extra });
      expect(res.status, Object.keys(extra)[0]).toBe(402);
    }
    expect(mock.stats.lastBody?.tools).toBeUndefined();
    const ok = await post(t.key, base);
    expect(ok.status).toBe(200);
    await stack.waitSettled([ok.headers.get('x-request-id')!]);
    await expectLedgerOk(t.tenantId);
  });

  it('audio and file parts are refused unless the catalog says the model takes them; nothing is held', async () => {
    const t = await stack.tenant('1.00');
    const audio = { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } };
    const res = await post(t.key, { model: 'text/mini', messages: [{ role: 'user', content: [audio] }] });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toEqual({
      type: 'invalid_request_error',
      code: 'unsupported_content',
      param: 'messages[0].content[0]',
      message: 'This model does not accept audio input.',
    });
    const image = await post(t.key, { model: 'text/mini', messages: [{ role: 'user', content: [IMAGE] }] });
    expect((await image.json()).error.message).toBe('This model does not accept image input.');
    expect(await holdsOf(t.tenantId)).toBe(0);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });
});

describe('no raw pass-through', () => {
  const chat = { model: 'text/mini', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] };

  it('refuses parameters that change the vendor price, naming them; nothing is charged', async () => {
    const t = await stack.tenant('1.00');
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ service_tier: 'priority' }, 'service_tier'],
      [{ service_tier: 'flex' }, 'service_tier'],
      [{ plugins: [{ id: 'web' }] }, 'plugins'],
      [{ web_search_options: {} }, 'web_search_options'],
      [{ modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' } }, 'modalities'],
      [{ prediction: { type: 'content', content: 'x' } }, 'prediction'],
      [{ logprobs: true }, 'logprobs'],
      [{ vendor_specific: { x: 1 } }, 'vendor_specific'],
    ];
    const before = mock.stats.requests;
    for (const [extra, param] of cases) {
      const res = await post(t.key, { ...chat, ...extra });
      expect(res.status, param).toBe(400);
      const { error } = await res.json();
      expect(error, param).toMatchObject({ type: 'invalid_request_error', code: 'unsupported_parameter', param });
    }
    const unknown = await (await post(t.key, { ...chat, vendor_specific: 1 })).json();
    expect(unknown.error.message).toBe('Unrecognized request argument supplied: vendor_specific');
    expect(mock.stats.requests).toBe(before);
    expect(await holdsOf(t.tenantId)).toBe(0);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });

  it("accepts OpenRouter's own fields and never forwards them (the mock vendor refuses any field OpenAI lacks)", async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const openrouter = {
      // honoured now (test/openrouter.test.ts): the fallbacks must exist, the provider order names deployments
      models: ['text/mini'],
      provider: { order: ['primary'], allow_fallbacks: false },
      route: 'fallback',
      transforms: ['middle-out'],
      usage: { include: true },
      reasoning: { effort: 'high' },
      plugins: [],
      top_k: 40,
      repetition_penalty: 1.1,
      service_tier: 'default',
    };
    const stream = await client.chat.completions.create({ ...chat, stream: true, ...openrouter } as never);
    let text = '';
    let usage: OpenAI.Completions.CompletionUsage | undefined;
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage; // usage.include is honoured like stream_options.include_usage
    }
    expect(text).toBe('Hello world foo');
    expect(usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    expect(mock.stats.lastBody).toEqual({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      service_tier: 'default',
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it("forwards what the catalog lists in the model's extra_params", async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { ...chat, model: 'text/extra', mock: { output_tokens: 2 }, max_tokens: 10 });
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toBe('Hello world');
    expect(mock.stats.lastBody).toMatchObject({ mock: { output_tokens: 2 } });
  });
});

describe('cancellation bills what the vendor bills', () => {
  it('a client that leaves before the first token pays the prompt (estimated), not zero', { timeout: 20000 }, async () => {
    const t = await stack.tenant('1.00');
    const aborted = mock.stats.aborted;
    const ac = new AbortController();
    const messages = [{ role: 'user', content: 'a long prompt the vendor is still reading' }];
    // mock-slow sends its first token after 500 ms; the client gives up after 200 ms, before any byte
    setTimeout(() => ac.abort(), 200);
    await expect(
      fetch(`${stack.baseUrl}/chat/completions`, {
        method: 'POST',
        signal: ac.signal,
        headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'text/slow', stream: true, max_tokens: 50, messages }),
      }),
    ).rejects.toThrow(/abort/i);
    let id = '';
    for (let i = 0; i < 200 && !id; i++) {
      const { rows } = await stack.db.query(`select request_id from ledger where tenant_id = $1 and kind = 'debit'`, [t.tenantId]);
      id = rows[0]?.request_id ?? '';
      if (!id) await new Promise((r) => setTimeout(r, 50));
    }
    const { rows } = await stack.db.query('select amount_micros, input_tokens, output_tokens, estimated, outcome from ledger where request_id = $1', [id]);
    // the worker's o200k_base estimate of the prompt, at 1 µBRL per token
    const prompt = await estimatePromptTokens(messages);
    expect(prompt).toBeGreaterThan(10);
    expect(rows[0]).toEqual({ amount_micros: BigInt(prompt), input_tokens: prompt, output_tokens: 0, estimated: true, outcome: 'cancelled' });
    await new Promise((r) => setTimeout(r, 100));
    expect(mock.stats.aborted).toBe(aborted + 1);
    await expectLedgerOk(t.tenantId);
  });
});

describe('workers resolve the upstream from their own catalog', () => {
  async function forge(job: Record<string, unknown>) {
    const reply = await stack.nc.request(subjects.job('openai'), encode(job), { timeout: 5000 });
    return decodeJson(reply.data);
  }
  const jobFor = async (modelId: string, over: Record<string, unknown> = {}) => {
    const m = (await getModel(stack.db, modelId))!;
    const id = `gen-forged${Math.random().toString(36).slice(2)}`;
    return {
      v: 1,
      request_id: id,
      tenant_id: 'ten_x',
      key_id: 'key_x',
      model: { id: m.id, fingerprint: fingerprint(m), input_price: m.input_price.toString(), output_price: m.output_price.toString() },
      body: { messages: [{ role: 'user', content: 'hi' }] },
      max_tokens: 5,
      reply_to: subjects.stream('nobody', id),
      deadline: Date.now() + 60000,
      ...over,
    } satisfies Job | Record<string, unknown>;
  };

  it("a job whose catalog entry differs from the worker's is refused as invalid", async () => {
    const job = await jobFor('text/mini');
    expect(await forge({ ...job, model: { ...(job.model as object), fingerprint: 'forged-entry' } })).toMatchObject({ ok: false, code: 'invalid_job' });
    expect(await forge({ ...job, model: { ...(job.model as object), input_price: '0' } })).toMatchObject({ ok: false, code: 'invalid_job' });
  });

  it('a job naming another upstream or key variable is served from the catalog entry, never from the job', async () => {
    const attacker = await startMockUpstream();
    try {
      const job = await jobFor('text/mini');
      const before = mock.stats.requests;
      const forged = { ...job, model: { ...(job.model as object), base_url: attacker.url, api_key_env: 'DATABASE_URL' } };
      expect(await forge(forged)).toMatchObject({ ok: true });
      await new Promise((r) => setTimeout(r, 300));
      expect(attacker.stats.requests).toBe(0);
      expect(mock.stats.requests).toBe(before + 1);
      expect(mock.stats.lastAuthorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    } finally {
      await attacker.close();
    }
  });

  it('a catalog entry naming a variable outside WORKER_UPSTREAM_KEYS is not configured: the variable is never read', async () => {
    const t = await stack.tenant('1.00');
    const before = mock.stats.requests;
    const res = await post(t.key, { model: 'leak/env', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toMatchObject({ code: 'upstream_not_configured' });
    expect(mock.stats.requests).toBe(before);
  });
});
