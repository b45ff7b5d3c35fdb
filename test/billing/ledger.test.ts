import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Db } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { admit, closeLease, credit, openLease, settle, settleBatch, sweepExpiredHolds, releaseHold, type Settlement } from '../../src/billing/ledger.ts';
import { AdmissionBatcher } from '../../src/billing/admission-batcher.ts';
import { Admission } from '../../src/billing/admission.ts';
import { ledgerCheck } from '../../src/billing/ledger-check.ts';

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
const state = async (tenantId: string) => (await db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId])).rows[0];
const s = (a: { tenantId: string; keyId: string }, requestId: string, cost: bigint): Settlement => ({
  requestId,
  tenantId: a.tenantId,
  keyId: a.keyId,
  costMicros: cost,
  model: 'm',
  inputTokens: 1,
  outputTokens: 1,
  estimated: false,
  outcome: 'completed',
  at: new Date(),
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
    // Other test files' metering sweeps the same database, so which sweeper released the old hold
    // (and so this call's count) is a race; what must hold is the state it leaves.
    await sweepExpiredHolds(db);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000n, held_micros: 2000n });
    await releaseHold(db, `sw-${a.tenantId}-new`);
    await releaseHold(db, `sw-${a.tenantId}-new`);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000n, held_micros: 0n });
  });
});

describe('admission leases (catraca_lease_open / catraca_lease_close, settlement against a lease)', () => {
  const lease = (a: { tenantId: string; keyId: string }, id: string, amount: bigint, richness = 4, ttlMs = 60000) =>
    openLease(db, { leaseId: id, tenantId: a.tenantId, keyId: a.keyId, amount, richness, ttlMs });

  it('grants a lease only while the tenant is rich relative to it, and never to a rate-limited key', async () => {
    const a = await account(10_000n);
    expect(await lease(a, `l1-${a.tenantId}`, 3_000n)).toEqual({ status: 'per_request', held: 0n, available: 10_000n }); // 3 000 × 4 > 10 000
    expect(await lease(a, `l2-${a.tenantId}`, 2_500n)).toEqual({ status: 'ok', held: 2_500n, available: 10_000n });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000n, held_micros: 2_500n });
    expect(await lease(a, `l3-${a.tenantId}`, 2_000n)).toMatchObject({ status: 'per_request', available: 7_500n });
    const rl = await createApiKey(db, { tenantId: a.tenantId, rateLimitRequests: 10, rateLimitIntervalS: 60 });
    expect((await lease({ tenantId: a.tenantId, keyId: rl.record.id }, `l4-${a.tenantId}`, 10n)).status).toBe('per_request');
    const limited = await createApiKey(db, { tenantId: a.tenantId, limitMicros: 1_000n });
    expect((await lease({ tenantId: a.tenantId, keyId: limited.record.id }, `l5-${a.tenantId}`, 300n)).status).toBe('per_request'); // key's 1 000 < 300 × 4
  });

  it('settles each request against its lease; closing keeps what may still settle, then releases the rest exactly', async () => {
    const a = await account(100_000n);
    const id = `ls-${a.tenantId}`;
    expect((await lease(a, id, 10_000n)).status).toBe('ok');
    // the door admitted 3 requests of worst case 3 000 under it; two ended costing 1 200 and 800
    await settle(db, { ...s(a, `${id}-r1`, 1_200n), hold: id });
    await settle(db, { ...s(a, `${id}-r2`, 800n), hold: id });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 98_000n, held_micros: 8_000n });
    // close: at most 1 200 + 800 + 3 000 (the one still running) can ever be debited under it
    expect(await closeLease(db, id, 5_000n)).toBe(5_000n);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 98_000n, held_micros: 3_000n });
    await settle(db, { ...s(a, `${id}-r3`, 2_999n), hold: id });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 95_001n, held_micros: 1n });
    // once the door saw every request end, the exact close releases the last micro-real
    expect(await closeLease(db, id, 1_200n + 800n + 2_999n)).toBe(1n);
    expect(await state(a.tenantId)).toEqual({ balance_micros: 95_001n, held_micros: 0n });
    expect((await db.query('select count(*)::int as n from holds where request_id = $1', [id])).rows[0].n).toBe(0);
    expect(await ledgerCheck(db, { tenantId: a.tenantId })).toMatchObject({ ok: true });
  });

  it("a usage message naming another tenant's lease never touches it", async () => {
    const a = await account(100_000n);
    const b = await account(100_000n);
    expect((await lease(b, `lb-${b.tenantId}`, 10_000n)).status).toBe('ok');
    await settle(db, { ...s(a, `forged-${a.tenantId}`, 500n), hold: `lb-${b.tenantId}` });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 99_500n, held_micros: 0n });
    expect(await state(b.tenantId)).toEqual({ balance_micros: 100_000n, held_micros: 10_000n });
  });

  it('Admission: admits from one lease in memory, per request once the tenant is no longer rich, and closes exactly', async () => {
    const a = await account(700_000n);
    const adm = new Admission(db, new AdmissionBatcher(db), { doorId: 'unit', windowMs: 60_000, richness: 4, holdTtlMs: 60_000, minRequests: 10 });
    const req = (n: number) => ({
      requestId: `adm-${a.tenantId}-${n}`,
      tenantId: a.tenantId,
      keyId: a.keyId,
      min: 10_000n,
      max: 10_000n,
      ttlMs: 60_000,
      leasable: true,
    });
    const first = await adm.admit(req(1));
    expect(first).toMatchObject({ status: 'ok', held: 10_000n });
    expect(first.hold).toMatch(/^lease_unit_/);
    for (let i = 2; i <= 10; i++) expect((await adm.admit(req(i))).hold).toBe(first.hold);
    expect(adm.counts).toMatchObject({ leased: 10, perRequest: 0, leasesOpened: 1 });
    expect(await state(a.tenantId)).toEqual({ balance_micros: 700_000n, held_micros: 100_000n });
    // the lease is spent: the next one wants 2 × 100 000, and 600 000 < 200 000 × 4, so per request
    const eleventh = await adm.admit(req(11));
    expect(eleventh.hold).toBe(req(11).requestId);
    expect(adm.counts).toMatchObject({ leased: 10, perRequest: 1 });
    // the requests end: 4 settled at 4 000 each, the door saw them; 6 it never saw end
    for (let i = 1; i <= 4; i++) {
      await settle(db, { ...s(a, req(i).requestId, 4_000n), hold: first.hold });
      adm.finish(req(i).requestId, 4_000n);
    }
    await adm.close();
    // kept: 4 × 4 000 + 6 × 10 000 − 16 000 settled = 60 000, plus the per-request hold of 10 000
    expect(await state(a.tenantId)).toEqual({ balance_micros: 684_000n, held_micros: 70_000n });
    expect(await ledgerCheck(db, { tenantId: a.tenantId })).toMatchObject({ ok: true });
  });

  it('Admission: a key gets a lease only once it is busy (leaseAfter requests in one window); a slow key holds per request', async () => {
    const a = await account(10_000_000n);
    const adm = new Admission(db, new AdmissionBatcher(db), { doorId: 'busy', windowMs: 1000, richness: 4, holdTtlMs: 60_000, leaseAfter: 3 });
    const req = (n: number) => ({
      requestId: `busy-${a.tenantId}-${n}`,
      tenantId: a.tenantId,
      keyId: a.keyId,
      min: 1_000n,
      max: 1_000n,
      ttlMs: 60_000,
      leasable: true,
    });
    // slow: one request per window, never a lease
    for (let i = 1; i <= 3; i++) {
      expect((await adm.admit(req(i))).hold).toBe(req(i).requestId);
      await new Promise((r) => setTimeout(r, 1050));
    }
    expect(adm.counts).toMatchObject({ leased: 0, perRequest: 3, leasesOpened: 0 });
    // busy: the third request within the window opens a lease, the ones after it use it
    expect((await adm.admit(req(4))).hold).toBe(req(4).requestId);
    expect((await adm.admit(req(5))).hold).toBe(req(5).requestId);
    const third = await adm.admit(req(6));
    expect(third.hold).toMatch(/^lease_busy_/);
    expect((await adm.admit(req(7))).hold).toBe(third.hold);
    expect(adm.counts).toMatchObject({ leased: 2, perRequest: 5, leasesOpened: 1 });
    // held: five own holds of 1 000 and a lease of 16 × 1 000
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000_000n, held_micros: 5_000n + 16_000n });
    adm.finish(req(6).requestId, 0n);
    adm.finish(req(7).requestId, 0n);
    await adm.close();
    expect(await state(a.tenantId)).toEqual({ balance_micros: 10_000_000n, held_micros: 5_000n });
  });

  it('a batch settles exactly as the same items one by one (leases, own holds, duplicates, shortfall)', async () => {
    async function world() {
      const a = await account(50_000n);
      const b = await account(3_000n);
      await lease(a, `lw-${a.tenantId}`, 10_000n);
      await admit(db, { requestId: `own-${b.tenantId}`, tenantId: b.tenantId, keyId: b.keyId, min: 2_000n, max: 2_000n, ttlMs: 60_000 });
      await closeLease(db, `lw-${a.tenantId}`, 6_000n); // closing: keeps 6 000
      const items = [
        { ...s(a, `r1-${a.tenantId}`, 2_500n), hold: `lw-${a.tenantId}` },
        { ...s(b, `own-${b.tenantId}`, 1_500n) },
        { ...s(a, `r2-${a.tenantId}`, 3_500n), hold: `lw-${a.tenantId}` }, // drains the closing lease: deleted
        { ...s(a, `r1-${a.tenantId}`, 2_500n), hold: `lw-${a.tenantId}` }, // duplicate within the batch
        { ...s(b, `r3-${b.tenantId}`, 9_000n) }, // no hold: a shortfall
      ];
      return { a, b, items };
    }
    const one = await world();
    const each = [];
    for (const it of one.items) each.push(await settle(db, it));
    const two = await world();
    const batch = await settleBatch(db, two.items);
    expect(batch.map((r) => [r.status, r.debited])).toEqual(each.map((r) => [r.status, r.debited]));
    expect(batch.map((r) => [r.status, r.debited])).toEqual([
      ['settled', 2_500n],
      ['settled', 1_500n],
      ['settled', 3_500n],
      ['duplicate', 0n],
      ['settled', 1_500n],
    ]);
    for (const [x, y] of [
      [one.a, two.a],
      [one.b, two.b],
    ]) {
      const [sx, sy] = [await state(x.tenantId), await state(y.tenantId)];
      expect(sy).toEqual(sx);
      expect((await db.query('select count(*)::int as n from holds where tenant_id = $1', [y.tenantId])).rows[0].n).toBe(0);
      expect(await ledgerCheck(db, { tenantId: y.tenantId })).toMatchObject({ ok: true });
    }
    expect(await state(two.b.tenantId)).toEqual({ balance_micros: 0n, held_micros: 0n });
  });
});

describe('catraca_settle_batch against catraca_settle item by item', () => {
  it('returns the same rows and writes the same balances, keys, holds and ledger rows (lease, own hold, redelivery, unknown tenant, shortfall)', async () => {
    const at = new Date('2026-03-02T10:00:00.000Z');
    async function world() {
      const a = await account(50_000n);
      const b = await account(3_000n);
      const c = await account(20_000n);
      expect(
        (await openLease(db, { leaseId: `la-${a.tenantId}`, tenantId: a.tenantId, keyId: a.keyId, amount: 10_000n, richness: 4, ttlMs: 60_000 })).status,
      ).toBe('ok');
      expect(
        (await openLease(db, { leaseId: `lc-${c.tenantId}`, tenantId: c.tenantId, keyId: c.keyId, amount: 5_000n, richness: 4, ttlMs: 60_000 })).status,
      ).toBe('ok');
      await closeLease(db, `lc-${c.tenantId}`, 4_000n); // closing, keeps 4 000
      await admit(db, { requestId: `own-${b.tenantId}`, tenantId: b.tenantId, keyId: b.keyId, min: 2_000n, max: 2_000n, ttlMs: 60_000 });
      const item = (x: { tenantId: string; keyId: string }, id: string, cost: bigint, hold?: string): Settlement => ({
        ...s(x, id, cost),
        at,
        model: `m-${id.slice(0, 2)}`,
        inputTokens: Number(cost % 97n),
        outputTokens: Number(cost % 89n),
        estimated: cost % 2n === 0n,
        hold: hold ?? null,
      });
      await settle(db, item(a, `r0-${a.tenantId}`, 1_000n, `la-${a.tenantId}`)); // settled before: the batch redelivers it
      const items = [
        item(a, `r1-${a.tenantId}`, 2_500n, `la-${a.tenantId}`),
        item(b, `own-${b.tenantId}`, 1_500n), // its own hold: released whole
        item(a, `r0-${a.tenantId}`, 1_000n, `la-${a.tenantId}`), // redelivered
        { ...item(a, `r9-${a.tenantId}`, 1n), tenantId: 'ten_missing' },
        item(c, `r2-${c.tenantId}`, 4_000n, `lc-${c.tenantId}`), // drains the closing lease: deleted
        item(a, `r1-${a.tenantId}`, 2_500n, `la-${a.tenantId}`), // duplicate within the batch
        item(b, `r3-${b.tenantId}`, 9_000n), // no hold, more than the balance: a shortfall
        item(a, `r4-${a.tenantId}`, 20_000n, `la-${a.tenantId}`), // more than the lease has left
        item(b, `r5-${b.tenantId}`, 100n, `la-${a.tenantId}`), // names another tenant's lease; nothing left: debits 0
      ];
      return { accounts: [a, b, c], items };
    }
    // every id of a world, replaced by its role, so two worlds compare
    const normalize = (accounts: { tenantId: string; keyId: string }[], v: unknown) =>
      JSON.parse(
        JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x)).replace(/(ten|key)_[a-z0-9]+/g, (id) => {
          const i = accounts.findIndex((a) => a.tenantId === id || a.keyId === id);
          return i < 0 ? id : `${id.slice(0, 3)}#${i}`;
        }),
      );
    const snapshot = async (accounts: { tenantId: string; keyId: string }[]) => {
      const tenants = accounts.map((a) => a.tenantId);
      const q = async (sql: string) => normalize(accounts, (await db.query(sql, [tenants])).rows);
      return {
        tenants: await q('select id, balance_micros, held_micros from tenants where id = any($1) order by array_position($1, id)'),
        keys: await q(
          'select id, held_micros, usage_micros, window_start, window_usage_micros from api_keys where tenant_id = any($1) order by array_position($1, tenant_id)',
        ),
        holds: await q(
          'select request_id, tenant_id, key_id, amount_micros, spent_micros, kind, closing from holds where tenant_id = any($1) order by request_id',
        ),
        ledger: await q(
          `select tenant_id, kind, amount_micros, balance_after_micros, source, request_id, external_id, key_id, model, input_tokens, output_tokens,
                  cost_micros, estimated, outcome, note, case when source = 'request' then created_at end as created_at
             from ledger where tenant_id = any($1) order by id`,
        ),
      };
    };

    const one = await world();
    const each = [];
    for (const it of one.items) each.push(await settle(db, it));
    const two = await world();
    const batch = await settleBatch(db, two.items);

    expect(batch).toEqual(each);
    expect(batch).toEqual([
      { status: 'settled', debited: 2_500n, balance: 46_500n },
      { status: 'settled', debited: 1_500n, balance: 1_500n },
      { status: 'duplicate', debited: 0n, balance: 46_500n },
      { status: 'unknown_tenant', debited: 0n, balance: 0n },
      { status: 'settled', debited: 4_000n, balance: 16_000n },
      { status: 'duplicate', debited: 0n, balance: 46_500n },
      { status: 'settled', debited: 1_500n, balance: 0n },
      { status: 'settled', debited: 20_000n, balance: 26_500n },
      { status: 'settled', debited: 0n, balance: 0n },
    ]);
    const [x, y] = [await snapshot(one.accounts), await snapshot(two.accounts)];
    expect(y).toEqual(x);
    expect(y.tenants).toEqual([
      { id: 'ten#0', balance_micros: '26500n', held_micros: '0n' },
      { id: 'ten#1', balance_micros: '0n', held_micros: '0n' },
      { id: 'ten#2', balance_micros: '16000n', held_micros: '0n' },
    ]);
    expect(y.holds).toEqual([
      { request_id: 'la-ten#0', tenant_id: 'ten#0', key_id: 'key#0', amount_micros: '0n', spent_micros: '23500n', kind: 'lease', closing: false },
    ]);
    expect(y.keys.map((k: { usage_micros: string; held_micros: string }) => [k.usage_micros, k.held_micros])).toEqual([
      ['23500n', '0n'],
      ['3000n', '0n'],
      ['4000n', '0n'],
    ]);
    const debits = y.ledger.filter((r: { kind: string }) => r.kind === 'debit');
    expect(
      debits.map((r: { request_id: string; amount_micros: string; cost_micros: string; note: string | null }) => [
        r.request_id,
        r.amount_micros,
        r.cost_micros,
        r.note,
      ]),
    ).toEqual([
      ['r0-ten#0', '1000n', '1000n', null],
      ['r1-ten#0', '2500n', '2500n', null],
      ['own-ten#1', '1500n', '1500n', null],
      ['r2-ten#2', '4000n', '4000n', null],
      ['r3-ten#1', '1500n', '9000n', 'shortfall: cost exceeded the available balance'],
      ['r4-ten#0', '20000n', '20000n', null],
      ['r5-ten#1', '0n', '100n', 'shortfall: cost exceeded the available balance'],
    ]);
    for (const a of two.accounts) expect(await ledgerCheck(db, { tenantId: a.tenantId })).toMatchObject({ ok: true });
  });
});
