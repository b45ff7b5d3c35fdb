import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, type Db } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { credit } from '../../src/billing/ledger.ts';
import { AdmissionBatcher } from '../../src/billing/admission-batcher.ts';

let db: Db;
beforeAll(() => {
  db = createPool(process.env.DATABASE_URL!, 8);
});
afterAll(async () => {
  await db.end();
});

describe('AdmissionBatcher', () => {
  it('coalesces a hot tenant into few calls and admits exactly what the balance covers', async () => {
    const t = await createTenant(db, 'batch');
    await credit(db, { tenantId: t.id, amountMicros: 10_000n, source: 'grant' });
    const keys = await Promise.all([0, 1, 2].map(() => createApiKey(db, { tenantId: t.id })));
    const batcher = new AdmissionBatcher(db);
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        batcher.admit({ requestId: `b-${t.id}-${i}`, tenantId: t.id, keyId: keys[i % 3].record.id, min: 1000n, max: 1000n, ttlMs: 60000 }),
      ),
    );
    expect(results.filter((r) => r.status === 'ok')).toHaveLength(10);
    expect(results.filter((r) => r.status === 'insufficient_balance')).toHaveLength(50);
    // admitted in arrival order: the first ten
    expect(results.slice(0, 10).every((r) => r.status === 'ok')).toBe(true);
    expect(batcher.calls).toBeLessThanOrEqual(3);
    const { rows } = await db.query('select held_micros from tenants where id = $1', [t.id]);
    expect(rows[0].held_micros).toBe(10_000n);
  });

  it('keeps tenants independent: one call each for two quiet tenants', async () => {
    const batcher = new AdmissionBatcher(db);
    const ts = await Promise.all(
      [0, 1].map(async (i) => {
        const t = await createTenant(db, `quiet-${i}`);
        await credit(db, { tenantId: t.id, amountMicros: 5000n, source: 'grant' });
        return { t, k: (await createApiKey(db, { tenantId: t.id })).record };
      }),
    );
    const [a, b] = await Promise.all(
      ts.map(({ t, k }) => batcher.admit({ requestId: `q-${t.id}`, tenantId: t.id, keyId: k.id, min: 100n, max: 9000n, ttlMs: 60000 })),
    );
    expect([a.status, a.held, b.status, b.held]).toEqual(['ok', 5000n, 'ok', 5000n]);
    expect(batcher.calls).toBe(2);
  });
});
