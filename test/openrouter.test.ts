import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type MockUpstream, startMockUpstream } from '../bench/mock-upstream/server.ts';
import { costMicros, type Prices, usageCostMicros } from '../src/billing/money.ts';
import { encode } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';
import { addDeployment, type ModelInput, upsertModel } from '../src/db/models.ts';
import { estimatePromptTokens } from '../src/providers/shared/estimate.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// OpenRouter's dialect and vendor trouble, through the whole path (two front doors, a worker
// process, metering) against the mock vendor failing in each way: fallbacks across `models`,
// several deployments per model with failover, cooldown and circuits, cached tokens at the cached
// price, provider preferences, finer key limits, catalog changes seen by every door within a second.
const UPSTREAM_KEY = 'sk-upstream-or-0123456789abcdef';
const OK: Prices = { input: 3_000_000n, output: 12_000_000n };
const BROKEN: Prices = { input: 1_000_000n, output: 2_000_000n };
const FIRST_BYTE_MS = 500;

let stack: TestStack;
let mock: MockUpstream;

const model = (id: string, upstream: string, prices: Prices, over: Partial<ModelInput> = {}) =>
  upsertModel(stack.db, {
    id,
    pool: 'openai',
    upstream_model: upstream,
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: prices.input,
    output_price: prices.output,
    ...over,
  });

beforeAll(async () => {
  mock = await startMockUpstream({ host: '127.0.0.1', port: 0, outputTokens: 4 });
  stack = await startStack({
    gateways: 2,
    workers: 1,
    pools: 'sim,openai,anthropic',
    env: { MOCK_UPSTREAM_KEY: UPSTREAM_KEY, WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY', UPSTREAM_FIRST_BYTE_TIMEOUT_MS: String(FIRST_BYTE_MS) },
  });
  await model('fb/ok', 'gpt-4o-mini', OK);
  await model('fb/broken', 'mock-500', BROKEN);
  await model('fb/limited', 'mock-429', BROKEN);
  await model('fb/context', 'mock-context', BROKEN);
  await model('fb/hang', 'mock-hang', BROKEN);
  await model('fb/refused', 'gpt-4o-mini', BROKEN, { base_url: 'http://127.0.0.1:1/v1' });
  await model('fb/midstream', 'mock-fail-midstream', BROKEN);
  await model('fb/reasoner', 'mock-reasoning', OK, { reasoning: true });
  await model('fb/claude', 'mock-claude-thinking', OK, { pool: 'anthropic', protocol: 'anthropic', reasoning: true });
  await model('cache/oa', 'gpt-4o-mini', { input: 1_000_000n, output: 2_000_000n }, { cached_input_price: 100_000n });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const client = (key: string, door = 0) => new OpenAI({ baseURL: stack.urlOf(stack.gateways[door]), apiKey: key, maxRetries: 0 });
const post = (key: string, body: Record<string, unknown>, door = 0) =>
  fetch(`${stack.urlOf(stack.gateways[door])}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
const debitOf = async (requestId: string) => {
  await stack.waitSettled([requestId]);
  const { rows } = await stack.db.query("select amount_micros, model from ledger where request_id = $1 and kind = 'debit'", [requestId]);
  expect(rows).toHaveLength(1);
  return rows[0] as { amount_micros: bigint; model: string };
};
const calls = (upstream: string) => mock.stats.byModel[upstream] ?? 0;

describe('models: fallbacks across catalog models', () => {
  it.each([
    ['fb/broken', 'mock-500'],
    ['fb/limited', 'mock-429'],
    ['fb/context', 'mock-context'],
    ['fb/refused', null],
  ])('%s fails before its first byte: fb/ok answers, billed once at its own price', async (failing, upstream) => {
    const t = await stack.tenant('1.00');
    const before = upstream ? calls(upstream) : 0;
    const okBefore = calls('gpt-4o-mini');
    const { data, response } = await client(t.key)
      .chat.completions.create({
        model: failing,
        models: [failing, 'fb/ok'],
        route: 'fallback',
        max_tokens: 5,
        messages: [{ role: 'user', content: 'hi' }],
      } as never)
      .withResponse();
    expect(data.model).toBe('fb/ok');
    expect(data.choices[0].message.content).toBe('Hello world foo bar');
    if (upstream) expect(calls(upstream)).toBe(before + 1);
    expect(calls('gpt-4o-mini')).toBe(okBefore + 1);
    const debit = await debitOf(response.headers.get('x-request-id')!);
    expect(debit).toEqual({ amount_micros: costMicros(data.usage!.prompt_tokens, data.usage!.completion_tokens, OK), model: 'fb/ok' });
  });

  it('a model that never answers is left after the first-byte timeout; the prompt it may bill is added to the one debit', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { models: ['fb/hang', 'fb/ok'], stream: true, stream_options: { include_usage: true }, max_tokens: 5 });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('"model":"fb/ok"');
    expect(text).not.toContain('"model":"fb/hang"');
    const usage = JSON.parse(
      text
        .split('\n\n')
        .find((l) => l.includes('"usage":{'))!
        .slice(6),
    ).usage;
    const hangPrompt = await estimatePromptTokens([{ role: 'user', content: 'hi' }]);
    const debit = await debitOf(res.headers.get('x-request-id')!);
    expect(debit.amount_micros).toBe(costMicros(usage.prompt_tokens, usage.completion_tokens, OK) + costMicros(hangPrompt, 0, BROKEN));
  });

  it('no retry after the first byte: a stream that breaks mid-way is the answer, billed once', async () => {
    const t = await stack.tenant('1.00');
    const okBefore = calls('gpt-4o-mini');
    const res = await post(t.key, { models: ['fb/midstream', 'fb/ok'], stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('"finish_reason":"error"');
    expect(calls('gpt-4o-mini')).toBe(okBefore);
    await debitOf(res.headers.get('x-request-id')!);
  });

  it('every fallback must be one the key may use: 403 naming it, before anything is held', async () => {
    const t = await stack.tenant('1.00', { models: ['fb/broken'] });
    const res = await post(t.key, { models: ['fb/broken', 'fb/ok'] });
    expect(res.status).toBe(403);
    expect((await res.json()).error).toMatchObject({ code: 'model_not_allowed', message: 'This API key is not allowed to use model "fb/ok".' });
    const holds = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [t.tenantId]);
    expect(holds.rows[0].n).toBe(0);
  });

  it('the hold covers the dearest fallback: a balance that covers only the cheaper one is refused (402)', async () => {
    // fb/cheap's worst case with 4096 output tokens: R$ 0,008… ; fb/ok's: R$ 0,049…
    await model('fb/cheap', 'gpt-4o-mini', BROKEN);
    const t = await stack.tenant('0.02');
    expect((await post(t.key, { model: 'fb/cheap' })).status).toBe(200);
    const res = await post(t.key, { models: ['fb/cheap', 'fb/ok'] });
    expect(res.status).toBe(402);
    expect((await res.json()).error.code).toBe('insufficient_balance');
  });
});

describe('deployments: weighted choice, failover, cooldown, circuits, provider preferences', () => {
  const SECOND_OUTPUT = 20_000_000n;
  beforeAll(async () => {
    for (const [id, primary] of [
      ['dep/fails', 'mock-500'],
      ['dep/limited', 'mock-429'],
      ['dep/midstream', 'mock-fail-midstream'],
    ] as const) {
      await model(id, primary, BROKEN);
      await addDeployment(stack.db, `dep_${id.slice(4)}_second`, {
        model_id: id,
        name: 'second',
        protocol: 'openai',
        base_url: mock.url,
        api_key_env: 'MOCK_UPSTREAM_KEY',
        upstream_model: 'gpt-4o-mini',
        output_price: SECOND_OUTPUT,
      });
    }
    stack.nc.publish(subjects.catalogChanged, encode({ model: 'dep/*' }));
    await stack.nc.flush();
    await new Promise((r) => setTimeout(r, 300));
  });
  const order = (...names: string[]) => ({ order: names });

  it('the primary answers 500: the second deployment serves it, debited at its own price override', async () => {
    const t = await stack.tenant('1.00');
    const { data, response } = await client(t.key)
      .chat.completions.create({
        model: 'dep/fails',
        provider: order('primary', 'second'),
        max_tokens: 5,
        messages: [{ role: 'user', content: 'hi' }],
      } as never)
      .withResponse();
    expect(data.model).toBe('dep/fails');
    const debit = await debitOf(response.headers.get('x-request-id')!);
    expect(debit.amount_micros).toBe(costMicros(data.usage!.prompt_tokens, data.usage!.completion_tokens, { input: BROKEN.input, output: SECOND_OUTPUT }));
  });

  it('a deployment that answered 429 cools down (retry-after honoured): the next request does not call it', async () => {
    const t = await stack.tenant('1.00');
    const before = calls('mock-429');
    expect((await post(t.key, { model: 'dep/limited', provider: order('primary', 'second') })).status).toBe(200);
    expect(calls('mock-429')).toBe(before + 1);
    const again = await post(t.key, { model: 'dep/limited', provider: order('primary', 'second') });
    expect(again.status).toBe(200);
    expect(calls('mock-429')).toBe(before + 1);
    // only the cooling one allowed: nothing to call, 503 with its retry-after
    const only = await post(t.key, { model: 'dep/limited', provider: { only: ['primary'] } });
    expect(only.status).toBe(503);
    expect(only.headers.get('retry-after')).toMatch(/^\d+$/);
    expect((await only.json()).error.code).toBe('upstream_cooling_down');
    expect(calls('mock-429')).toBe(before + 1);
  });

  it('allow_fallbacks false: the first deployment only', async () => {
    const t = await stack.tenant('1.00');
    const okBefore = calls('gpt-4o-mini');
    const res = await post(t.key, { model: 'dep/fails', provider: { order: ['primary'], allow_fallbacks: false } });
    expect([502, 503]).toContain(res.status);
    expect(calls('gpt-4o-mini')).toBe(okBefore);
  });

  it('no retry on another deployment after the first byte', async () => {
    const t = await stack.tenant('1.00');
    const okBefore = calls('gpt-4o-mini');
    const res = await post(t.key, { model: 'dep/midstream', provider: order('primary', 'second'), stream: true });
    expect(await res.text()).toContain('"finish_reason":"error"');
    expect(calls('gpt-4o-mini')).toBe(okBefore);
  });

  it('provider preferences that match no deployment, and unknown provider fields, are 400s naming them', async () => {
    const t = await stack.tenant('1.00');
    const none = await post(t.key, { model: 'dep/fails', provider: { only: ['elsewhere'] } });
    expect(none.status).toBe(400);
    expect((await none.json()).error).toMatchObject({ code: 'no_deployment_matches', param: 'provider' });
    const unknown = await post(t.key, { model: 'fb/ok', provider: { order: ['x'], favourite: 'me' } });
    expect(unknown.status).toBe(400);
    const e = (await unknown.json()).error;
    expect(e.param).toBe('provider');
    expect(e.message).toContain('favourite');
  });
});

describe("OpenRouter's fields against a vendor that refuses unknown parameters", () => {
  it('every field accepted, nothing unknown forwarded; reasoning mapped only for a reasoning model', async () => {
    const t = await stack.tenant('1.00');
    const fields = {
      models: ['fb/ok'],
      route: 'fallback',
      provider: { order: ['primary'], allow_fallbacks: true, sort: 'price', data_collection: 'deny', require_parameters: true },
      reasoning: { effort: 'high' },
      usage: { include: true },
      transforms: ['middle-out'],
      stream: true,
    };
    const res = await post(t.key, { model: 'fb/ok', ...fields });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('"usage":{');
    const sent = mock.stats.lastBody!;
    for (const f of ['models', 'route', 'provider', 'reasoning', 'usage', 'transforms', 'reasoning_effort']) expect(sent).not.toHaveProperty(f);
    const r = await post(t.key, { model: 'fb/reasoner', reasoning: { effort: 'high' } });
    expect(r.status).toBe(200);
    expect(mock.stats.lastBody).toMatchObject({ reasoning_effort: 'high' });
    expect(mock.stats.lastBody).not.toHaveProperty('reasoning');
  });

  it('reasoning on an Anthropic reasoning model is a thinking budget within max_tokens; exclude hides the reasoning, still billed as output', async () => {
    const t = await stack.tenant('1.00');
    const shown = await (await post(t.key, { model: 'fb/claude', max_tokens: 2000, temperature: 0.5, reasoning: { effort: 'high' } })).json();
    expect(mock.stats.lastBody).toMatchObject({ thinking: { type: 'enabled', budget_tokens: 1600 }, max_tokens: 2000 });
    expect(mock.stats.lastBody).not.toHaveProperty('temperature');
    expect(shown.choices[0].message.reasoning).toBe('Let me think');
    const hidden = await post(t.key, { model: 'fb/claude', max_tokens: 2000, reasoning: { max_tokens: 1200, exclude: true } });
    const body = await hidden.json();
    expect(mock.stats.lastBody).toMatchObject({ thinking: { type: 'enabled', budget_tokens: 1200 } });
    expect(body.choices[0].message).not.toHaveProperty('reasoning');
    const debit = await debitOf(hidden.headers.get('x-request-id')!);
    expect(debit.amount_micros).toBe(costMicros(body.usage.prompt_tokens, body.usage.completion_tokens, OK));
    // hidden or shown, the reasoning is part of the output billed
    expect(body.usage.completion_tokens).toBe(shown.usage.completion_tokens);
  });
});

describe('cached prompt tokens billed at the cached price', () => {
  const prices = { input: 1_000_000n, output: 2_000_000n, cachedInput: 100_000n };
  it.each([false, true])('OpenAI cached_tokens (streamed: %s): usage shows them, the debit prices them apart, /generation reports them', async (stream) => {
    const t = await stack.tenant('1.00');
    const body = { model: 'cache/oa', prompt_cache_key: 'conv-1', max_tokens: 5, messages: [{ role: 'user', content: 'a long shared context '.repeat(10) }] };
    let usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
    let id: string;
    if (stream) {
      const res = await post(t.key, { ...body, stream: true, stream_options: { include_usage: true } });
      id = res.headers.get('x-request-id')!;
      usage = JSON.parse(
        (await res.text())
          .split('\n\n')
          .find((l) => l.includes('"usage":{'))!
          .slice(6),
      ).usage;
    } else {
      const res = await post(t.key, body);
      id = res.headers.get('x-request-id')!;
      usage = (await res.json()).usage;
    }
    const cached = Math.floor(usage.prompt_tokens / 2);
    expect(usage.prompt_tokens_details?.cached_tokens).toBe(cached);
    const expected = usageCostMicros({ ...usage, cached_tokens: cached }, prices);
    expect(expected).toBeLessThan(costMicros(usage.prompt_tokens, usage.completion_tokens, prices));
    expect((await debitOf(id)).amount_micros).toBe(expected);
    const gen = await (await fetch(`${stack.baseUrl}/generation?id=${id}`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    expect(gen.data).toMatchObject({ native_tokens_cached: cached, tokens_prompt: usage.prompt_tokens });
  });
});

describe('catalog changes reach every front door within a second', () => {
  it('a new price applies to the next request through both doors', async () => {
    const t = await stack.tenant('1.00');
    await model('live/m', 'gpt-4o-mini', OK);
    stack.nc.publish(subjects.catalogChanged, encode({ model: 'live/m' }));
    await stack.nc.flush();
    const first = await client(t.key, 1)
      .chat.completions.create({ model: 'live/m', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect((await debitOf(first.response.headers.get('x-request-id')!)).amount_micros).toBe(
      costMicros(first.data.usage!.prompt_tokens, first.data.usage!.completion_tokens, OK),
    );
    const NEW: Prices = { input: 5_000_000n, output: 50_000_000n };
    await model('live/m', 'gpt-4o-mini', NEW);
    stack.nc.publish(subjects.catalogChanged, encode({ model: 'live/m' }));
    await stack.nc.flush();
    await new Promise((r) => setTimeout(r, 1000));
    for (const door of [0, 1]) {
      const r = await client(t.key, door)
        .chat.completions.create({ model: 'live/m', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
      expect((await debitOf(r.response.headers.get('x-request-id')!)).amount_micros).toBe(
        costMicros(r.data.usage!.prompt_tokens, r.data.usage!.completion_tokens, NEW),
      );
    }
  });
});

describe('finer key limits', () => {
  it('--max-concurrent: a second request while one is in flight is 429; admitted again once it ends', async () => {
    const t = await stack.tenant('1.00', { maxConcurrent: 1 });
    const slow = post(t.key, { model: 'sim/lorem', stream: true, sim: { tokens_per_second: 20, output_tokens: 20 } });
    const first = await slow;
    expect(first.status).toBe(200);
    const second = await post(t.key, { model: 'sim/echo' });
    expect(second.status).toBe(429);
    expect(second.headers.get('retry-after')).toBe('1');
    expect((await second.json()).error.code).toBe('concurrency_limit_exceeded');
    await first.text();
    await stack.waitNoHolds(t.tenantId);
    expect((await post(t.key, { model: 'sim/echo' })).status).toBe(200);
  });

  it('--tpm: counted at admission (prompt estimate + max_tokens); beyond it 429 with retry-after to the next minute', async () => {
    const t = await stack.tenant('1.00', { tpm: 120 });
    expect((await post(t.key, { model: 'sim/echo', max_tokens: 50 })).status).toBe(200);
    const over = await post(t.key, { model: 'sim/echo', max_tokens: 100 });
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(over.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    expect((await over.json()).error.code).toBe('tpm_limit_exceeded');
  });

  it('--end-user-limit: each end user has its own daily cap; the user is recorded on each debit', async () => {
    // sim/echo with max_tokens 10: worst case ~R$ 0,00004; a cap of R$ 0,005 fits many, not one of 4 096 output tokens (~R$ 0,0082)
    const t = await stack.tenant('1.00', { endUserDailyLimit: 5_000n });
    const ok = await post(t.key, { model: 'sim/echo', max_tokens: 10, user: 'cliente-a' });
    expect(ok.status).toBe(200);
    const id = ok.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const row = await stack.db.query('select end_user from ledger where request_id = $1', [id]);
    expect(row.rows[0].end_user).toBe('cliente-a');
    // a request whose worst case exceeds the cap is refused for that end user only
    const big = await post(t.key, { model: 'sim/echo', user: 'cliente-a', max_tokens: 4096 });
    expect(big.status).toBe(402);
    expect((await big.json()).error).toMatchObject({ code: 'end_user_limit_exceeded', param: 'user' });
    expect((await post(t.key, { model: 'sim/echo', user: 'cliente-b', max_tokens: 10 })).status).toBe(200);
  });
});

describe('GET /key in OpenRouter’s published schema', () => {
  // OpenRouter's GetCurrentKeyData (its OpenAPI document, openrouter.ai/docs/api/api-reference/api-keys/get-current-key)
  const KeyData = z.object({
    label: z.string(),
    limit: z.number().nullable(),
    limit_remaining: z.number().nullable(),
    limit_reset: z.string().nullable(),
    include_byok_in_limit: z.boolean(),
    usage: z.number(),
    usage_daily: z.number(),
    usage_weekly: z.number(),
    usage_monthly: z.number(),
    byok_usage: z.number(),
    byok_usage_daily: z.number(),
    byok_usage_weekly: z.number(),
    byok_usage_monthly: z.number(),
    is_free_tier: z.boolean(),
    is_management_key: z.boolean(),
    is_provisioning_key: z.boolean(),
    creator_user_id: z.string(),
    rate_limit: z.object({ requests: z.number(), interval: z.string(), note: z.string() }),
    expires_at: z.string().nullable().optional(),
  });
  it('every required field, with its type', async () => {
    const t = await stack.tenant('1.00');
    const body = await (await fetch(`${stack.baseUrl}/key`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    expect(KeyData.safeParse(body.data).error?.issues ?? []).toEqual([]);
    expect(body.data.creator_user_id).toBe(t.tenantId);
  });
});
