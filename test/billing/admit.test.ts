// catraca_admit_batch (rewritten in migration 024) gives exactly what catraca_admit gives item by
// item: statuses, held and available micros, rate-limit fields, and the accounts and holds after.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/db/keys.ts';
import { createPool, type Db } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { admit, admitBatch, credit, settle, type AdmitRequest, type AdmitResult } from '../../src/billing/ledger.ts';

let db: Db;
beforeAll(() => {
  db = createPool(process.env.DATABASE_URL!, 4);
});
afterAll(async () => {
  await db.end();
});

/**
 * Four tenants: A (100 000, a plain key and a revoked one), B (10 000, a key limited to 5 000 a
 * day, 1 000 of it already spent this window), C (50 000, a key of 2 requests an hour), D (500, a
 * key of 5 requests an hour). Returns the batch that exercises them, in order.
 */
async function scenario(tag: string) {
  const tenant = async (balance: bigint) => {
    const t = await createTenant(db, `admit-test-${tag}`);
    await credit(db, { tenantId: t.id, amountMicros: balance, source: 'grant' });
    return t.id;
  };
  const A = await tenant(100_000n);
  const B = await tenant(10_000n);
  const C = await tenant(50_000n);
  const D = await tenant(500n);
  const kA = (await createApiKey(db, { tenantId: A })).record.id;
  const kR = (await createApiKey(db, { tenantId: A })).record.id;
  await db.query('update api_keys set revoked_at = now() where id = $1', [kR]);
  const kB = (await createApiKey(db, { tenantId: B, limitMicros: 5_000n, limitReset: 'daily' })).record.id;
  const kC = (await createApiKey(db, { tenantId: C, rateLimitRequests: 2, rateLimitIntervalS: 3600 })).record.id;
  const kD = (await createApiKey(db, { tenantId: D, rateLimitRequests: 5, rateLimitIntervalS: 3600 })).record.id;
  // 1 000 of B's key limit spent in this window
  await settle(db, {
    requestId: `pre-${tag}-${B}`,
    tenantId: B,
    keyId: kB,
    costMicros: 1_000n,
    model: 'm',
    inputTokens: 1,
    outputTokens: 1,
    estimated: false,
    outcome: 'completed',
    at: new Date(),
  });
  let n = 0;
  const item = (tenantId: string, keyId: string, min: bigint, max: bigint): AdmitRequest => ({
    requestId: `adm-${tag}-${tenantId}-${n++}`,
    tenantId,
    keyId,
    min,
    max,
    ttlMs: 60_000,
  });
  const items = [
    item(A, kA, 1_000n, 30_000n), // ok: 30 000 of 100 000
    item(A, kA, 1_000n, 80_000n), // ok, partial: the 70 000 left
    item(A, kA, 1_000n, 5_000n), // nothing left
    item(B, kB, 1_000n, 3_000n), // key: 5 000 − 1 000 spent = 4 000 left; ok 3 000
    item(B, kB, 2_000n, 4_000n), // key: 1 000 left < min, and < the tenant's 6 000
    item(B, kB, 500n, 4_000n), // key: 1 000 left ≥ min: ok 1 000
    item(A, kR, 1n, 1n), // revoked
    item(C, kC, 1_000n, 20_000n), // 1st request of the hour: ok 20 000
    item(C, kC, 1_000n, 40_000n), // 2nd: ok, partial 30 000
    item(C, kC, 1n, 1n), // 3rd: rate limited
    item(D, kD, 1_000n, 1_000n), // 500 < min: refused, yet the request counts against the rate limit
  ];
  return { A, B, C, D, kA, kR, kB, kC, kD, items };
}

const withoutReset = ({ rl_reset_ms: _r, ...r }: AdmitResult) => r;
const accounts = async (s: Awaited<ReturnType<typeof scenario>>) => ({
  tenants: (
    await db.query('select id, balance_micros, held_micros from tenants where id = any($1) order by array_position($1, id)', [[s.A, s.B, s.C, s.D]])
  ).rows.map(({ id: _id, ...r }) => r),
  keys: (
    await db.query('select id, held_micros, rl_count, last_used_at is not null as used from api_keys where id = any($1) order by array_position($1, id)', [
      [s.kA, s.kR, s.kB, s.kC, s.kD],
    ])
  ).rows.map(({ id: _id, ...r }) => r),
  holds: (
    await db.query(
      `select h.amount_micros, h.kind, round(extract(epoch from h.expires_at - h.created_at))::int as ttl_s
         from holds h join unnest($1::text[]) with ordinality as r(id, ord) on h.request_id = r.id order by r.ord`,
      [s.items.map((i) => i.requestId)],
    )
  ).rows,
});

describe('catraca_admit_batch', () => {
  it('admits a batch mixing tenants exactly: balance, partial reservation, key limit in its window, revoked key, rate limit', async () => {
    const s = await scenario('batch');
    const results = await admitBatch(db, s.items);
    expect(results.map(withoutReset)).toEqual([
      { status: 'ok', held: 30_000n, available: 100_000n, rl_limit: null, rl_remaining: null },
      { status: 'ok', held: 70_000n, available: 70_000n, rl_limit: null, rl_remaining: null },
      { status: 'insufficient_balance', held: 0n, available: 0n, rl_limit: null, rl_remaining: null },
      { status: 'ok', held: 3_000n, available: 4_000n, rl_limit: null, rl_remaining: null },
      { status: 'key_limit', held: 0n, available: 1_000n, rl_limit: null, rl_remaining: null },
      { status: 'ok', held: 1_000n, available: 1_000n, rl_limit: null, rl_remaining: null },
      { status: 'key_revoked', held: 0n, available: 0n, rl_limit: null, rl_remaining: null },
      { status: 'ok', held: 20_000n, available: 50_000n, rl_limit: 2, rl_remaining: 1 },
      { status: 'ok', held: 30_000n, available: 30_000n, rl_limit: 2, rl_remaining: 0 },
      { status: 'rate_limited', held: 0n, available: 0n, rl_limit: 2, rl_remaining: 0 },
      { status: 'insufficient_balance', held: 0n, available: 500n, rl_limit: 5, rl_remaining: 4 },
    ]);
    // the rate-limit window resets within the hour; keys without a rate limit have no reset
    for (const [i, r] of results.entries()) {
      if ([7, 8, 9, 10].includes(i)) {
        expect(r.rl_reset_ms).toBeGreaterThan(0n);
        expect(r.rl_reset_ms).toBeLessThanOrEqual(3_600_000n);
      } else expect(r.rl_reset_ms).toBeNull();
    }
    expect(await accounts(s)).toEqual({
      tenants: [
        { balance_micros: 100_000n, held_micros: 100_000n },
        { balance_micros: 9_000n, held_micros: 4_000n },
        { balance_micros: 50_000n, held_micros: 50_000n },
        { balance_micros: 500n, held_micros: 0n },
      ],
      keys: [
        { held_micros: 100_000n, rl_count: 0, used: true },
        { held_micros: 0n, rl_count: 0, used: false },
        { held_micros: 4_000n, rl_count: 0, used: true },
        { held_micros: 50_000n, rl_count: 2, used: true },
        { held_micros: 0n, rl_count: 1, used: false },
      ],
      holds: [30_000n, 70_000n, 3_000n, 1_000n, 20_000n, 30_000n].map((amount_micros) => ({ amount_micros, kind: 'request', ttl_s: 60 })),
    });
  });

  it('gives what catraca_admit gives item by item, and leaves the same accounts and holds', async () => {
    const batch = await scenario('b');
    const single = await scenario('s');
    const b = await admitBatch(db, batch.items);
    const s: AdmitResult[] = [];
    for (const it of single.items) s.push(await admit(db, it));
    expect(b.map(withoutReset)).toEqual(s.map(withoutReset));
    expect(b.map((r) => r.rl_reset_ms === null)).toEqual(s.map((r) => r.rl_reset_ms === null));
    expect(await accounts(batch)).toEqual(await accounts(single));
  });

  it("counts a key's requests across batches; an unknown tenant fails the batch on the same foreign key as catraca_admit", async () => {
    const s = await scenario('refused');
    expect((await admitBatch(db, [s.items[6], { ...s.items[9], requestId: `${s.items[9].requestId}-x` }, s.items[9]])).map((r) => r.status)).toEqual([
      'key_revoked',
      'ok',
      'ok',
    ]);
    expect((await admitBatch(db, [{ ...s.items[9], requestId: `${s.items[9].requestId}-2` }])).map((r) => r.status)).toEqual(['rate_limited']);
    const unknown = { ...s.items[0], requestId: `${s.items[0].requestId}-u`, tenantId: 'ten_missing' };
    const batchErr = await admitBatch(db, [unknown, { ...unknown, requestId: `${unknown.requestId}-2` }]).catch((e) => e);
    const singleErr = await admit(db, unknown).catch((e) => e);
    expect(batchErr.code).toBe('23503');
    expect(batchErr.constraint).toBe(singleErr.constraint);
  });
});
