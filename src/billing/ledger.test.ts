import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Db } from '../db/pool.ts';
import { createTenant } from '../db/tenants.ts';
import { createApiKey } from '../db/keys.ts';
import { admit, credit, settle, settleBatch, sweepExpiredHolds, releaseHold, type Settlement } from './ledger.ts';

let db: Db;
beforeAll(() => {
  db = createPool(process.env.DATABASE_URL!, 4);
});
afterAll(async () => {
  await db.end();
});

async function account(balance: bigint) {
  const t = await createTenant(db, 'ledger-test');
  if (balance > 0n) await credit(db, { tenantId: t.id, amountMicros: balance, source: 'grant' });
  const k = await createApiKey(db, { tenantId: t.id });
  return { tenantId: t.id, keyId: k.record.id };
}
const state = async (tenantId: string) =>
  (await db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId])).rows[0];
const s = (a: { tenantId: string; keyId: string }, requestId: string, cost: bigint): Settlement => ({
  requestId, tenantId: a.tenantId, keyId: a.keyId, costMicros: cost, model: 'm', inputTokens: 1, outputTokens: 1, estimated: false, outcome: 'completed', at: new Date(),
});

describe('ledger functions', () => {
  it('settles a batch in order: settled, duplicate, unknown tenant, each exactly once', async () => {
    const a = await account(10_000n);
    const b = await account(5_000n);
    const id = `sb-${a.tenantId}`;
    await admit(db, { requestId: `${id}-1`, tenantId: a.tenantId, keyId: a.keyId, min: 3000n, max: 3000n, ttlMs: 60000 });
    const results = await settleBatch(db, [
      s(a, `${id}-1`, 2500n),
      s(b, `${id}-2`, 1000n),
      s(a, `${id}-1`, 2500n),
      { ...s(b, `${id}-3`, 1n), tenantId: 'ten_missing' },
    ]);
    expect(results.map((r) => r.status)).toEqual(['settled', 'settled', 'duplicate', 'unknown_tenant']);
    expect(results[0]).toEqual({ status: 'settled', debited: 2500n, balance: 7500n });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 7500n, held_micros: 0n });
    expect(await state(b.tenantId)).toEqual({ balance_micros: 4000n, held_micros: 0n });
    expect((await settle(db, s(a, `${id}-1`, 2500n))).status).toBe('duplicate');
  });

  it('never debits below zero: a cost above what is available is a recorded shortfall', async () => {
    const a = await account(1_000n);
    const r = await settle(db, s(a, `short-${a.tenantId}`, 4_000n));
    expect(r).toEqual({ status: 'settled', debited: 1_000n, balance: 0n });
    const { rows } = await db.query('select amount_micros, cost_micros, note from ledger where request_id = $1', [`short-${a.tenantId}`]);
    expect(rows[0]).toEqual({ amount_micros: 1_000n, cost_micros: 4_000n, note: 'shortfall: cost exceeded the available balance' });
  });

  it('the sweeper releases expired holds only; release without debit is idempotent', async () => {
    const a = await account(10_000n);
    await admit(db, { requestId: `sw-${a.tenantId}-old`, tenantId: a.tenantId, keyId: a.keyId, min: 1000n, max: 1000n, ttlMs: 0 });
    await admit(db, { requestId: `sw-${a.tenantId}-new`, tenantId: a.tenantId, keyId: a.keyId, min: 2000n, max: 2000n, ttlMs: 600000 });
    await new Promise((r) => setTimeout(r, 20));
    expect(await sweepExpiredHolds(db)).toBeGreaterThanOrEqual(1);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000n, held_micros: 2000n });
    await releaseHold(db, `sw-${a.tenantId}-new`);
    await releaseHold(db, `sw-${a.tenantId}-new`);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000n, held_micros: 0n });
  });
});
