import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GetCurrentKeyResponse$inboundSchema } from '@openrouter/sdk/models/operations';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockUpstream, startMockUpstream } from '../bench/mock-upstream/server.ts';
import { costMicros, type Prices, usageCostMicros } from '../src/billing/money.ts';
import { encode } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';
import { addDeployment, type ModelInput, setAlias, upsertModel } from '../src/db/models.ts';
import { type Candidate, holdFor } from '../src/gateway/candidates.ts';
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
  await model('fb/sigfail', 'mock-claude-signature-fail', OK, { pool: 'anthropic', protocol: 'anthropic', reasoning: true });
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
/** The tenant's one open hold while its request runs (a key with a request rate limit holds per request, not from a lease). */
const openHold = async (tenantId: string, timeoutMs = 5000): Promise<bigint> => {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const { rows } = await stack.db.query('select amount_micros from holds where tenant_id = $1', [tenantId]);
    if (rows.length) return rows[0].amount_micros as bigint;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('no hold appeared');
};
const HELD = { rateLimitRequests: 1000, rateLimitIntervalS: 60 };
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** The real CLI, as an operator runs it, against this stack. */
const catraca = (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    const env = { ...process.env, DATABASE_URL: stack.databaseUrl, NATS_URL: stack.natsUrl } as NodeJS.ProcessEnv;
    execFile(process.execPath, [join(ROOT, 'bin', 'catraca.js'), ...args], { cwd: ROOT, env, timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err ? (err as { code?: unknown }).code : 0;
      resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
    });
  });
const lastUsage = (sse: string) =>
  JSON.parse(
    sse
      .split('\n\n')
      .find((l) => l.includes('"usage":{'))!
      .slice(6),
  ).usage;

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

  it('no retry once a thinking signature was sent towards the client: the failure is the answer, debited once', async () => {
    // (a chat stream shows a signature with its reasoning, so this client saw no byte yet: a 502;
    // an Anthropic-protocol client would have had the signature_delta)
    const t = await stack.tenant('1.00');
    const before = calls('mock-claude-signature-fail');
    const okBefore = calls('gpt-4o-mini');
    const res = await post(t.key, { models: ['fb/sigfail', 'fb/ok'], stream: true, max_tokens: 50 });
    expect(res.status).toBe(502);
    expect((await res.json()).error.code).toBe('upstream_stream_interrupted');
    expect(calls('mock-claude-signature-fail')).toBe(before + 1);
    expect(calls('gpt-4o-mini')).toBe(okBefore);
    const id = res.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const { rows } = await stack.db.query(
      "select amount_micros, cost_micros, model, input_tokens, output_tokens from ledger where request_id = $1 and kind = 'debit'",
      [id],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].model).toBe('fb/sigfail');
    expect(rows[0].amount_micros).toBe(costMicros(rows[0].input_tokens, rows[0].output_tokens, OK));
    await stack.waitNoHolds(t.tenantId);
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
    for (const [id, primary, second, over] of [
      ['dep/fails', 'mock-500', 'gpt-4o-mini', {}],
      ['dep/limited', 'mock-429', 'gpt-4o-mini', {}],
      ['dep/midstream', 'mock-fail-midstream', 'gpt-4o-mini', {}],
      ['dep/hang', 'mock-hang', 'second-of-hang', {}],
      ['dep/refused', 'gpt-4o-mini', 'second-of-refused', { base_url: 'http://127.0.0.1:1/v1' }],
      ['dep/slowstart', 'mock-slow-start', 'second-of-slowstart', {}],
    ] as const) {
      await model(id, primary, BROKEN, over);
      await addDeployment(stack.db, `dep_${id.slice(4)}_second`, {
        model_id: id,
        name: 'second',
        protocol: 'openai',
        base_url: mock.url,
        api_key_env: 'MOCK_UPSTREAM_KEY',
        upstream_model: second,
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

  it.each([
    ['dep/hang', 'mock-hang', 'second-of-hang', 'takes the request and never answers (timeout)', true],
    ['dep/refused', null, 'second-of-refused', 'refuses the connection', false],
    [
      'dep/slowstart',
      'mock-slow-start',
      'second-of-slowstart',
      `accepts it but sends nothing within UPSTREAM_FIRST_BYTE_TIMEOUT_MS (${FIRST_BYTE_MS} ms)`,
      true,
    ],
  ])(
    'the primary of %s (%s) %s: the second deployment answers, debited once at its price (+ the prompt the primary may bill)',
    async (id, primary, second, _why, billable) => {
      const t = await stack.tenant('1.00');
      const before = primary ? calls(primary) : 0;
      const secondBefore = calls(second);
      const started = Date.now();
      const res = await post(t.key, { model: id, provider: order('primary', 'second'), max_tokens: 5, stream: true, stream_options: { include_usage: true } });
      expect(res.status).toBe(200);
      const text = await res.text();
      if (primary === 'mock-slow-start') expect(Date.now() - started).toBeLessThan(2500); // not waited out (3 s)
      expect(text).toContain('Hello world');
      expect(text).toContain(`"model":"${id}"`);
      if (primary) expect(calls(primary)).toBe(before + 1);
      // the answering deployment: the second, by its own upstream model name
      expect(calls(second)).toBe(secondBefore + 1);
      const usage = lastUsage(text);
      const carried = billable ? costMicros(await estimatePromptTokens([{ role: 'user', content: 'hi' }]), 0, BROKEN) : 0n;
      const debit = await debitOf(res.headers.get('x-request-id')!);
      expect(debit).toEqual({
        amount_micros: costMicros(usage.prompt_tokens, usage.completion_tokens, { input: BROKEN.input, output: SECOND_OUTPUT }) + carried,
        model: id,
      });
    },
  );

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

describe('the hold covers every attempt that may be billed', () => {
  const P: Prices = { input: 10_000_000n, output: 1_000_000n };
  const cand = (inputTokens: number, wanted: number, attempts: number, holdPrices = P): Candidate =>
    ({ model: {} as never, prices: holdPrices, holdPrices, inputTokens, requested: wanted, wanted, attempts }) as Candidate;

  it('holdFor: the worst path, each deployment that may fail after taking the prompt paid for', () => {
    // one model, 3 deployments: the full cost + 2 prompts
    expect(holdFor([cand(100, 10, 3)])).toEqual({
      min: costMicros(100, 10, P) + 2n * costMicros(100, 0, P),
      max: costMicros(100, 10, P) + 2n * costMicros(100, 0, P),
    });
    // no cap asked for: min is one output token, plus the extra prompts
    const uncapped = { ...cand(100, 10, 2), requested: null };
    expect(holdFor([uncapped]).min).toBe(costMicros(100, 1, P) + costMicros(100, 0, P));
    // models a (2 deployments) then b (1): b answering after both of a's failed is the worst path
    const a = cand(100, 10, 2);
    const b = cand(100, 50, 1, { input: 20_000_000n, output: 2_000_000n });
    const worst = 2n * costMicros(100, 0, P) + costMicros(100, 50, b.holdPrices);
    expect(holdFor([a, b])).toEqual({ min: worst, max: worst });
  });

  it('two deployments, the first accepts and then sends nothing: the debit (its prompt + the answer) is exact and within the hold; no shortfall', async () => {
    // a context of 12 tokens bounds the prompt the hold pays for at 12, while each attempt's is ~8:
    // one prompt held and two billed would exceed the hold
    await model('hold/two', 'mock-accept-hang', P, { context_length: 12 });
    await addDeployment(stack.db, 'dep_hold_two_second', {
      model_id: 'hold/two',
      name: 'second',
      protocol: 'openai',
      base_url: mock.url,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      upstream_model: 'second-of-hold',
    });
    const t = await stack.tenant('1.00', HELD);
    const before = calls('mock-accept-hang');
    const pending = client(t.key)
      .chat.completions.create({
        model: 'hold/two',
        provider: { order: ['primary', 'second'] },
        max_tokens: 4,
        messages: [{ role: 'user', content: 'hi' }],
      } as never)
      .withResponse();
    const hold = await openHold(t.tenantId);
    const { data, response } = await pending;
    expect(data.choices[0].message.content).toBe('Hello world foo bar');
    expect(calls('mock-accept-hang')).toBe(before + 1);
    expect(calls('second-of-hold')).toBe(1);
    // two attempts, each up to the 12-token prompt bound, the answer up to 4 output tokens
    expect(hold).toBe(costMicros(12, 4, P) + costMicros(12, 0, P));
    const carried = costMicros(await estimatePromptTokens([{ role: 'user', content: 'hi' }]), 0, P);
    const id = response.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const { rows } = await stack.db.query("select amount_micros, cost_micros, note from ledger where request_id = $1 and kind = 'debit'", [id]);
    expect(rows).toHaveLength(1);
    const expected = costMicros(data.usage!.prompt_tokens, data.usage!.completion_tokens, P) + carried;
    expect(rows[0]).toEqual({ amount_micros: expected, cost_micros: expected, note: null });
    expect(expected).toBeGreaterThan(costMicros(12, 4, P)); // more than one attempt's worst case: the second prompt had to be held
    expect(expected).toBeLessThanOrEqual(hold);
    const tenant = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [t.tenantId]);
    expect(tenant.rows[0]).toEqual({ balance_micros: 1_000_000n - expected, held_micros: 0n });
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

describe('catalog changes made with the CLI reach every front door within a second', () => {
  const NEW: Prices = { input: 5_000_000n, output: 50_000_000n };
  const FRESH: Prices = { input: 7_000_000n, output: 70_000_000n };
  const ask = (key: string, door: number, body: Record<string, unknown> = {}) =>
    client(key, door)
      .chat.completions.create({ model: 'live/m', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], ...body } as never)
      .withResponse();
  const billed = async (r: Awaited<ReturnType<typeof ask>>) => debitOf(r.response.headers.get('x-request-id')!);
  /** Runs the CLI; resolves with the time it ended (its NATS broadcast was flushed by then). */
  const run = async (...args: string[]) => {
    const r = await catraca(...args);
    expect(r.code, r.stderr).toBe(0);
    return Date.now();
  };
  /** Waits until `ms` after `since`: what a door does then is what it does within that much of the change. */
  const until = (since: number, ms: number) => new Promise((r) => setTimeout(r, Math.max(0, since + ms - Date.now())));

  beforeAll(async () => {
    await model('live/m', 'gpt-4o-mini', OK);
    await model('live/other', 'live-other', OK);
    await setAlias(stack.db, 'live-alias', 'live/m');
    stack.nc.publish(subjects.catalogChanged, encode({ model: 'live/*' }));
    await stack.nc.flush();
    await new Promise((r) => setTimeout(r, 300));
  });

  it('model set: a new price applies to the next request through both doors', async () => {
    const t = await stack.tenant('1.00');
    // both doors have the model, at its old price
    for (const door of [0, 1]) {
      const r = await ask(t.key, door);
      expect((await billed(r)).amount_micros).toBe(costMicros(r.data.usage!.prompt_tokens, r.data.usage!.completion_tokens, OK));
    }
    const changed = await run('model', 'set', '--id', 'live/m', '--pool', 'openai', '--input-price', '5', '--output-price', '50', '--json');
    await until(changed, 500);
    for (const door of [0, 1]) {
      const sent = Date.now();
      const r = await ask(t.key, door);
      expect(sent - changed).toBeLessThan(1000);
      expect(await billed(r)).toEqual({ amount_micros: costMicros(r.data.usage!.prompt_tokens, r.data.usage!.completion_tokens, NEW), model: 'live/m' });
    }
  });

  it('model deployment add: the next request through both doors may be routed to it', async () => {
    const t = await stack.tenant('1.00');
    // both doors have the model without it: a request for it matches no deployment
    for (const door of [0, 1]) {
      await ask(t.key, door);
      await expect(ask(t.key, door, { provider: { only: ['fresh'] } })).rejects.toMatchObject({ status: 400, code: 'no_deployment_matches' });
    }
    const changed = await run(
      'model',
      'deployment',
      'add',
      '--model',
      'live/m',
      '--name',
      'fresh',
      '--base-url',
      mock.url,
      '--api-key-env',
      'MOCK_UPSTREAM_KEY',
      '--upstream-model',
      'live-fresh',
      '--input-price',
      '7',
      '--output-price',
      '70',
      '--json',
    );
    await until(changed, 500);
    for (const door of [0, 1]) {
      const before = calls('live-fresh');
      const sent = Date.now();
      const r = await ask(t.key, door, { provider: { only: ['fresh'] } });
      expect(sent - changed).toBeLessThan(1000);
      expect(calls('live-fresh')).toBe(before + 1);
      expect((await billed(r)).amount_micros).toBe(costMicros(r.data.usage!.prompt_tokens, r.data.usage!.completion_tokens, FRESH));
    }
  });

  it('model alias add: an alias pointed elsewhere resolves to its new model through both doors', async () => {
    const t = await stack.tenant('1.00');
    for (const door of [0, 1]) {
      const r = await ask(t.key, door, { model: 'live-alias' });
      expect((await billed(r)).model).toBe('live/m');
    }
    const changed = await run('model', 'alias', 'add', '--alias', 'live-alias', '--model', 'live/other', '--json');
    await until(changed, 500);
    for (const door of [0, 1]) {
      const before = calls('live-other');
      const sent = Date.now();
      const r = await ask(t.key, door, { model: 'live-alias' });
      expect(sent - changed).toBeLessThan(1000);
      expect(calls('live-other')).toBe(before + 1);
      expect(await billed(r)).toEqual({ amount_micros: costMicros(r.data.usage!.prompt_tokens, r.data.usage!.completion_tokens, OK), model: 'live/other' });
    }
  });

  it('a request admitted before a price change is billed at the price it was held at', async () => {
    // the vendor takes 6 s to its first token (the mock's own parameter, forwarded for this model)
    await model('live/held', 'gpt-4o-mini', OK, { extra_params: ['mock'] });
    const t = await stack.tenant('1.00', HELD);
    let ended = false;
    const pending = client(t.key, 1)
      .chat.completions.create({ model: 'live/held', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], mock: { first_token_ms: 6000 } } as never)
      .withResponse()
      .finally(() => (ended = true));
    await openHold(t.tenantId);
    await run('model', 'set', '--id', 'live/held', '--pool', 'openai', '--input-price', '5', '--output-price', '50', '--json');
    expect(ended).toBe(false); // the change landed while the request was in flight
    const old = await pending;
    expect(await billed(old)).toEqual({ amount_micros: costMicros(old.data.usage!.prompt_tokens, old.data.usage!.completion_tokens, OK), model: 'live/held' });
    // and the next one pays the new price
    const next = await client(t.key, 1)
      .chat.completions.create({ model: 'live/held', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect((await billed(next)).amount_micros).toBe(costMicros(next.data.usage!.prompt_tokens, next.data.usage!.completion_tokens, NEW));
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

  it('--tpm: a token count is free and generates nothing, so it takes none of the budget', async () => {
    const t = await stack.tenant('1.00', { tpm: 60 });
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${stack.urlOf(stack.gateways[i % 2])}/messages/count_tokens`, {
        method: 'POST',
        headers: { 'x-api-key': t.key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model: 'fb/ok', messages: [{ role: 'user', content: 'how many tokens is this?' }] }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      expect((await res.json()).input_tokens).toBeGreaterThan(0);
    }
    // the whole minute's budget is still there for a request that generates
    expect((await post(t.key, { model: 'sim/echo', max_tokens: 50 })).status).toBe(200);
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
  // the schema OpenRouter publishes for GET /key: @openrouter/sdk's GetCurrentKeyResponse (zod, strict types, required fields)
  it('every field @openrouter/sdk requires, with its type', async () => {
    const t = await stack.tenant('1.00');
    const body = await (await fetch(`${stack.baseUrl}/key`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    const parsed = GetCurrentKeyResponse$inboundSchema.safeParse(body);
    expect(parsed.error?.issues ?? []).toEqual([]);
    expect(parsed.data?.data).toMatchObject({ creatorUserId: t.tenantId, includeByokInLimit: false, isManagementKey: false, isProvisioningKey: false });
  });
});
