import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startStack, type TestStack } from './helpers/stack.ts';
import { upsertModel } from '../src/db/models.ts';
import { createApiKey } from '../src/db/keys.ts';

// `strict/tenth` makes worst cases round numbers: input is free and every output token costs
// R$ 0,001 (1000 µBRL), so max_tokens 100 holds exactly R$ 0,10.
const TOKEN = 1000n;

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ gateways: 2, workers: 2 });
  await upsertModel(stack.db, {
    id: 'strict/tenth',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: 0n,
    output_price: 1_000_000_000n,
    max_output_tokens: 100,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const balance = async (tenantId: string) => (await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId])).rows[0];

function post(base: string, key: string, body: Record<string, unknown>) {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'strict/tenth', messages: [{ role: 'user', content: 'ping' }], ...body }),
  });
}

async function ledgerMatchesBalance(tenantId: string) {
  const { rows } = await stack.db.query(
    `select t.balance_micros,
            coalesce(sum(l.amount_micros) filter (where l.kind = 'credit'), 0)::bigint - coalesce(sum(l.amount_micros) filter (where l.kind = 'debit'), 0)::bigint as derived
       from tenants t left join ledger l on l.tenant_id = t.id where t.id = $1 group by t.balance_micros`,
    [tenantId],
  );
  expect(rows[0].balance_micros).toBe(rows[0].derived);
}

describe('strict prepaid', () => {
  it('100 concurrent requests through two front doors on R$ 1,00 at R$ 0,10 worst case: exactly 10 admitted', { timeout: 60000 }, async () => {
    const t = await stack.tenant('1.00');
    const slow = { max_tokens: 100, sim: { first_token_ms: 6000 } }; // every hold stays open until all are decided
    const responses = await Promise.all(Array.from({ length: 100 }, (_, i) => post(stack.urlOf(stack.gateways[i % 2]), t.key, slow)));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s !== 200 && s !== 402)).toEqual([]);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 402)).toHaveLength(90);
    const bodies = await Promise.all(responses.map((r) => r.text()));
    const refused = JSON.parse(bodies[statuses.indexOf(402)]);
    expect(refused.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_balance', param: null });
    const ids = responses.filter((r) => r.status === 200).map((r) => r.headers.get('x-request-id')!);
    await stack.waitSettled(ids);
    await stack.waitNoHolds(t.tenantId);
    // each admitted request echoed "ping": 1 output token
    expect(await balance(t.tenantId)).toEqual({ balance_micros: 1_000_000n - 10n * TOKEN, held_micros: 0n });
    await ledgerMatchesBalance(t.tenantId);
  });

  it("the same with the tenant's keys spread over front doors and workers", { timeout: 60000 }, async () => {
    const t = await stack.tenant('0.50');
    const extra = await Promise.all([1, 2].map(() => createApiKey(stack.db, { tenantId: t.tenantId })));
    const keys = [t.key, ...extra.map((k) => k.key)];
    const slow = { max_tokens: 100, sim: { first_token_ms: 6000 } }; // every hold stays open until all are decided
    const responses = await Promise.all(Array.from({ length: 60 }, (_, i) => post(stack.urlOf(stack.gateways[i % 2]), keys[i % 3], slow)));
    expect(responses.filter((r) => r.status === 200)).toHaveLength(5);
    expect(responses.filter((r) => r.status === 402)).toHaveLength(55);
    await Promise.all(responses.map((r) => r.text()));
    await stack.waitNoHolds(t.tenantId);
    expect((await balance(t.tenantId)).balance_micros).toBe(500_000n - 5n * TOKEN);
    await ledgerMatchesBalance(t.tenantId);
  });

  it('without max_tokens, the upstream max_tokens is clamped to what the balance pays for', async () => {
    const t = await stack.tenant('0.0035'); // 3 tokens and a half
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions
      .create({ model: 'strict/tenth', messages: [{ role: 'user', content: 'one two three four five six' }] })
      .withResponse();
    expect(res.data.choices[0].message.content).toBe('one two three');
    expect(res.data.choices[0].finish_reason).toBe('length');
    expect(res.data.usage!.completion_tokens).toBe(3);
    await stack.waitSettled([res.response.headers.get('x-request-id')!]);
    expect(await balance(t.tenantId)).toEqual({ balance_micros: 500n, held_micros: 0n });
  });

  it('with a max_tokens the balance cannot cover, 402 says how many tokens are affordable', async () => {
    const t = await stack.tenant('0.0035');
    const res = await post(stack.baseUrl, t.key, { max_tokens: 10 });
    expect(res.status).toBe(402);
    const body = await res.json();
    expect(body.error.message).toBe(
      'This request requires more credits, or fewer max_tokens. You requested up to 10 tokens, but can only afford 3 with your available balance of R$ 0.003500.',
    );
  });
});

describe('per-key limits', () => {
  it('a daily key limit is enforced in the same admission and reported exactly by /v1/key', async () => {
    const t = await stack.tenant('1.00', { limitMicros: 2500n, limitReset: 'daily' });
    let res = await post(stack.baseUrl, t.key, { max_tokens: 2, messages: [{ role: 'user', content: 'a b' }] });
    expect(res.status).toBe(200);
    await stack.waitSettled([res.headers.get('x-request-id')!]);
    res = await post(stack.baseUrl, t.key, { max_tokens: 1 });
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: {
        message:
          "This request requires more credits, or fewer max_tokens. You requested up to 1 tokens, but can only afford 0 with this key's remaining limit of R$ 0.000500.",
        type: 'insufficient_quota',
        code: 'key_limit_exceeded',
        param: null,
      },
    });
    const key = await fetch(`${stack.baseUrl}/key`, { headers: { authorization: `Bearer ${t.key}` } }).then((r) => r.json());
    expect(key.data).toMatchObject({
      limit: 0.0025,
      limit_remaining: 0.0005,
      limit_reset: 'daily',
      usage: 0.002,
      usage_daily: 0.002,
      usage_weekly: 0.002,
      usage_monthly: 0.002,
    });
    expect((await balance(t.tenantId)).balance_micros).toBe(1_000_000n - 2000n);
  });

  it('limit windows start at UTC midnight, Monday and the 1st', async () => {
    const { rows } = await stack.db.query(
      `select catraca_window_start('daily', $1) as d, catraca_window_start('weekly', $1) as w,
              catraca_window_start('monthly', $1) as m, catraca_window_start(null, $1) as n`,
      ['2026-11-22T23:59:59.999Z'],
    );
    expect(rows[0].d.toISOString()).toBe('2026-11-22T00:00:00.000Z');
    expect(rows[0].w.toISOString()).toBe('2026-11-16T00:00:00.000Z');
    expect(rows[0].m.toISOString()).toBe('2026-11-01T00:00:00.000Z');
    expect(rows[0].n).toBe(-Infinity);
  });
});

describe('rate limits', () => {
  it('a per-key request rate is enforced across front doors, with retry-after and x-ratelimit-* headers', async () => {
    // stay clear of an hour boundary: the window is fixed
    const intoHour = Date.now() % 3_600_000;
    if (intoHour > 3_590_000) await new Promise((r) => setTimeout(r, 3_600_000 - intoHour + 100));
    const t = await stack.tenant('1.00', { rateLimitRequests: 5, rateLimitIntervalS: 3600 });
    const statuses: number[] = [];
    let limited: Response | undefined;
    for (let i = 0; i < 8; i++) {
      const res = await post(stack.urlOf(stack.gateways[i % 2]), t.key, { max_tokens: 1 });
      statuses.push(res.status);
      if (res.status === 200) {
        expect(res.headers.get('x-ratelimit-limit')).toBe('5');
        expect(res.headers.get('x-ratelimit-remaining')).toBe(String(4 - i));
      }
      if (res.status === 429) limited = res;
      await res.text();
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    const retryAfter = Number(limited!.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    expect(limited!.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(Number(limited!.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now());
    const key = await fetch(`${stack.baseUrl}/key`, { headers: { authorization: `Bearer ${t.key}` } }).then((r) => r.json());
    expect(key.data.rate_limit).toEqual({ requests: 5, interval: '1h', note: 'Requests per interval, counted across every front door.' });
  });

  it('a rate-limited request gets the documented 429 body and is not charged', async () => {
    const t = await stack.tenant('1.00', { rateLimitRequests: 1, rateLimitIntervalS: 3600 });
    expect((await post(stack.baseUrl, t.key, { max_tokens: 1 })).status).toBe(200);
    const res = await post(stack.baseUrl, t.key, { max_tokens: 1 });
    expect(res.status).toBe(429);
    const body = await res.json();
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded', param: null });
    expect(body.error.message).toMatch(/^Rate limit exceeded\. Retry after \d+ s\.$/);
    await stack.waitNoHolds(t.tenantId);
    expect((await balance(t.tenantId)).balance_micros).toBe(1_000_000n - TOKEN);
  });
});
