// PostgreSQL CPU per settled usage message in catraca_settle_batch, without the stack: a fresh
// database, one tenant, one key and one lease (as at 500 streamed requests/s with leases), and
// batches of N items settled back to back on one connection, each batch its own transaction like
// the metering consumer's. Reports the CPU of that connection's backend (utime + stime from
// /proc/<pid>/stat, so PostgreSQL must run on this machine) and the wall time per batch.
//
//   npx tsx bench/settle-batch.ts [--batch 10,50] [--batches 2000] [--upto 022] [--preload 0] [--explain]
//
// --upto NNN     migrate only up to migration NNN (e.g. 022 to measure before a later migration)
// --preload N    ledger rows inserted first (debits of other requests), for an index of realistic size
// --explain      also print, for one batch of each size, every statement the function ran with
//                its actual time (auto_explain at notice level, nested statements)
import { parseArgs } from 'node:util';
import pg from 'pg';
import { credit, openLease, settleBatch, type Settlement } from '../src/billing/ledger.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { backendCpuSeconds, benchSettlement, explainCalls, freshDatabase } from './pg-bench.ts';
import { readCpuSeconds } from './procs.ts';
import { createTenant } from '../src/db/tenants.ts';

const { values } = parseArgs({
  options: {
    batch: { type: 'string', default: '10,50' },
    batches: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '100' },
    upto: { type: 'string' },
    preload: { type: 'string', default: '0' },
    explain: { type: 'boolean', default: false },
    server: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432' },
    name: { type: 'string', default: 'catraca_settle_bench' },
  },
});
const sizes = values.batch!.split(',').map(Number);
const batches = Number(values.batches);
const warmup = Number(values.warmup);
const url = `${values.server}/${values.name}?application_name=settle-bench`;

const applied = await freshDatabase(values.server!, values.name!, values.upto);
console.log(`database ${values.name}: ${applied.at(-1)} is the last migration applied`);
const db = createPool(url, 2);
const tenant = await createTenant(db, 'settle-bench');
await credit(db, { tenantId: tenant.id, amountMicros: 10n ** 15n, source: 'grant' });
const key = (await createApiKey(db, { tenantId: tenant.id })).record.id;
const lease = `lease_bench_${process.pid}`;
const opened = await openLease(db, { leaseId: lease, tenantId: tenant.id, keyId: key, amount: 10n ** 13n, richness: 4, ttlMs: 3_600_000 });
if (opened.status !== 'ok') throw new Error(`lease not opened: ${opened.status}`);

const preload = Number(values.preload);
if (preload > 0) {
  await db.query(
    `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model, input_tokens, output_tokens, cost_micros, outcome)
     select $1, 'debit', 0, 0, 'request', 'preload-' || i, $2, 'bench/mock', 1, 1, 0, 'completed' from generate_series(1, $3::int) i`,
    [tenant.id, key, preload],
  );
  await db.query('vacuum analyze ledger');
}

let seq = 0;
const batchOf = (n: number): Settlement[] =>
  Array.from({ length: n }, () => {
    const i = seq++;
    return benchSettlement(i, { requestId: `req_${process.pid}_${i.toString().padStart(10, '0')}`, tenantId: tenant.id, keyId: key, hold: lease });
  });

const client = await db.connect();
const pid = (await client.query('select pg_backend_pid() as pid')).rows[0].pid as number;
for (const n of sizes) {
  for (let i = 0; i < warmup; i++) await settleBatch(client, batchOf(n));
  const cpu0 = backendCpuSeconds(pid);
  const t0 = performance.now();
  let settled = 0;
  for (let i = 0; i < batches; i++) {
    const results = await settleBatch(client, batchOf(n));
    settled += results.filter((r) => r.status === 'settled').length;
  }
  const wallMs = performance.now() - t0;
  const cpuMs = (backendCpuSeconds(pid) - cpu0) * 1000;
  if (settled !== n * batches) throw new Error(`only ${settled} of ${n * batches} settled`);
  console.log(
    `batch ${String(n).padStart(3)}: ${batches} batches, ${settled} items | backend CPU ${((cpuMs * 1000) / settled).toFixed(1)} µs/item, ` +
      `${(cpuMs / batches).toFixed(3)} ms/batch | wall ${(wallMs / batches).toFixed(3)} ms/batch`,
  );
}

if (values.explain) {
  const show = await explainCalls(client);
  for (const n of sizes) await show(`batch of ${n}`, () => settleBatch(client, batchOf(n)));
}
client.release();
await db.end();
