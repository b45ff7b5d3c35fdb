// Admission alone: requests/s of the hold (catraca_admit) and of hold + settlement
// (catraca_settle), against the PostgreSQL at DATABASE_URL (default: the local one), with one
// hot tenant and with many tenants, each directly (one round trip per admission) and through the
// front door's per-tenant AdmissionBatcher. Run it with PGOPTIONS='-c synchronous_commit=off' to
// measure what the front door does (its pool commits holds asynchronously).
//
//   npx tsx bench/admission.ts [--seconds 5] [--concurrency 32] [--tenants 1,1000]
import { parseArgs } from 'node:util';
import { migrate } from '../src/db/migrate.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { createApiKey } from '../src/db/keys.ts';
import { admit, credit, settle } from '../src/billing/ledger.ts';
import { AdmissionBatcher } from '../src/billing/admission-batcher.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '32' },
    tenants: { type: 'string', default: '1,1000' },
    database: { type: 'string', default: process.env.DATABASE_URL ?? `postgres://postgres@127.0.0.1:5432/catraca_bench_admission` },
  },
});
const seconds = Number(values.seconds);
const concurrency = Number(values.concurrency);
const url = values.database!;

await migrate(url);
const db = createPool(url, concurrency);

async function tenants(n: number) {
  const out: { tenantId: string; keyId: string }[] = [];
  for (let i = 0; i < n; i++) {
    const t = await createTenant(db, `bench-${n}-${i}`);
    await credit(db, { tenantId: t.id, amountMicros: 1_000_000_000_000n, source: 'grant' });
    const k = await createApiKey(db, { tenantId: t.id });
    out.push({ tenantId: t.id, keyId: k.record.id });
  }
  return out;
}

function pct(sorted: number[], q: number) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

async function measure(label: string, pool: { tenantId: string; keyId: string }[], withSettle: boolean, batched = false) {
  const batcher = new AdmissionBatcher(db);
  let seq = 0;
  const lat: number[] = [];
  const until = performance.now() + seconds * 1000;
  const run = async () => {
    while (performance.now() < until) {
      const who = pool[seq % pool.length];
      const requestId = `bench-${process.pid}-${label}-${seq++}`;
      const t0 = performance.now();
      const request = { requestId, tenantId: who.tenantId, keyId: who.keyId, min: 100n, max: 5000n, ttlMs: 600000 };
      const r = batched ? await batcher.admit(request) : await admit(db, request);
      if (r.status !== 'ok') throw new Error(`admission refused: ${r.status}`);
      if (withSettle) {
        await settle(db, {
          requestId,
          tenantId: who.tenantId,
          keyId: who.keyId,
          costMicros: 1234n,
          model: 'bench',
          inputTokens: 10,
          outputTokens: 10,
          estimated: false,
          outcome: 'completed',
          at: new Date(),
        });
      }
      lat.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, run));
  lat.sort((a, b) => a - b);
  return { label, ops: lat.length, per_s: Math.round(lat.length / seconds), p50_ms: +pct(lat, 0.5).toFixed(2), p99_ms: +pct(lat, 0.99).toFixed(2) };
}

const rows = [];
for (const n of values.tenants!.split(',').map(Number)) {
  const pool = await tenants(n);
  rows.push(await measure(`admit, ${n} tenant${n > 1 ? 's' : ''}`, pool, false));
  rows.push(await measure(`admit+settle, ${n} tenant${n > 1 ? 's' : ''}`, pool, true));
  rows.push(await measure(`batched admit, ${n} tenant${n > 1 ? 's' : ''}`, pool, false, true));
  rows.push(await measure(`batched admit+settle, ${n} tenant${n > 1 ? 's' : ''}`, pool, true, true));
}
console.table(rows);
console.log(JSON.stringify({ concurrency, seconds, rows }));
await db.query('delete from holds');
await db.end();
