// PostgreSQL CPU per admitted request in catraca_admit / catraca_admit_batch, without the stack:
// a fresh database, T tenants with one key each (as in the 1 000-tenant scenario, where no tenant
// is busy enough for a lease), optionally thousands of open holds of other requests, and requests
// admitted round-robin over the tenants the way the front door does: one catraca_admit per request
// on a connection with synchronous_commit off (the door's pool), or catraca_admit_batch with k
// requests of one tenant (what AdmissionBatcher sends for a hot tenant). Like the real flow, each
// request's hold is then settled by catraca_settle_batch (the metering consumer's batches, on a
// second connection) or, one in --release-every, released by catraca_release. Reports the CPU of
// each connection's backend (utime + stime from /proc/<pid>/stat, so PostgreSQL must run on this
// machine) per request and the wall time per call; then lease open + close, the sweeper
// (catraca_sweep_holds) and the open-holds gauge query per call.
//
//   npx tsx bench/admit-batch.ts [--tenants 1000] [--requests 10000] [--batch 1,4] [--preload 3000]
//                                [--upto 023] [--key-limit] [--explain]
//
// --batch k,…       admission call sizes: 1 is catraca_admit, k > 1 catraca_admit_batch of k requests of one tenant
// --preload N       open holds of other requests (expiring in an hour) spread over the tenants
// --ledger N        ledger rows of earlier requests, for indexes of realistic size
// --inflight N      requests admitted and not yet settled (holds open at any time besides the preload)
// --settle-batch N  requests per catraca_settle_batch call
// --key-limit       every key has a daily spending limit and a request rate limit (the slower path)
// --upto NNN        migrate only up to migration NNN (e.g. 023 to measure before a later migration)
// --explain         also print every statement of one call of each kind with its actual time
//                   (auto_explain at notice level, nested statements); BENCH_PLANS=1 prints the plans
import { parseArgs } from 'node:util';
import pg from 'pg';
import {
  admit,
  admitBatch,
  closeLease,
  openHolds,
  openLease,
  releaseHold,
  settleBatch,
  sweepExpiredHolds,
  type AdmitRequest,
  type Settlement,
} from '../src/billing/ledger.ts';
import { createPool } from '../src/db/pool.ts';
import { backendCpuSeconds, benchSettlement, explainCalls, freshDatabase } from './pg-bench.ts';
import { readCpuSeconds } from './procs.ts';

const { values } = parseArgs({
  options: {
    tenants: { type: 'string', default: '1000' },
    requests: { type: 'string', default: '10000' },
    warmup: { type: 'string', default: '1000' },
    batch: { type: 'string', default: '1,4' },
    preload: { type: 'string', default: '3000' },
    ledger: { type: 'string', default: '100000' },
    inflight: { type: 'string', default: '500' },
    'settle-batch': { type: 'string', default: '50' },
    'release-every': { type: 'string', default: '20' },
    'key-limit': { type: 'boolean', default: false },
    upto: { type: 'string' },
    explain: { type: 'boolean', default: false },
    server: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432' },
    name: { type: 'string', default: 'catraca_admit_bench' },
  },
});
const T = Number(values.tenants);
const sizes = values.batch!.split(',').map(Number);
const requests = Number(values.requests);
const warmup = Number(values.warmup);
const inflight = Number(values.inflight);
const settleSize = Number(values['settle-batch']);
const releaseEvery = Number(values['release-every']);
const url = `${values.server}/${values.name}?application_name=admit-bench`;
const MAX = 40_000n; // a request's worst case, micro-BRL
const MIN = 2_000n;
const TTL = 330_000; // ms a hold lives (REQUEST_TIMEOUT_MS + HOLD_GRACE_MS)

const applied = await freshDatabase(values.server!, values.name!, values.upto);
console.log(`database ${values.name}: ${applied.at(-1)} is the last migration applied`);

// Seeding in bulk (createTenant/createApiKey/credit one by one would take thousands of round trips).
const seed = new pg.Client({ connectionString: url });
await seed.connect();
const BALANCE = 10n ** 13n;
await seed.query(
  `insert into tenants (id, name, balance_micros) select 'ten_bench_' || lpad(i::text, 5, '0'), 'admit-bench', $2 from generate_series(1, $1::int) i`,
  [T, BALANCE],
);
await seed.query(
  `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, note)
   select id, 'credit', balance_micros, balance_micros, 'grant', 'admit-bench' from tenants`,
);
await seed.query(
  `insert into api_keys (id, tenant_id, key_hash, key_hint, limit_micros, limit_reset, rate_limit_requests, rate_limit_interval_s)
   select 'key_bench_' || substr(id, 11), id, sha256(convert_to(id, 'UTF8')), 'sk-…bench', $1::bigint, $2::text, $3::int, $4::int from tenants`,
  values['key-limit'] ? [10n ** 12n, 'daily', 1_000_000, 60] : [null, null, null, null],
);
const preload = Number(values.preload);
if (preload > 0) {
  await seed.query(
    `insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at)
     select 'preload-' || i, 'ten_bench_' || lpad((1 + i % $2::int)::text, 5, '0'), 'key_bench_' || lpad((1 + i % $2::int)::text, 5, '0'),
            $3, now() + interval '1 hour'
       from generate_series(1, $1::int) i`,
    [preload, T, MAX],
  );
  await seed.query(
    `update tenants t set held_micros = h.s from (select tenant_id, sum(amount_micros) s from holds group by tenant_id) h where t.id = h.tenant_id`,
  );
  await seed.query(`update api_keys k set held_micros = h.s from (select key_id, sum(amount_micros) s from holds group by key_id) h where k.id = h.key_id`);
}
const ledgerRows = Number(values.ledger);
if (ledgerRows > 0) {
  await seed.query(
    `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model, input_tokens, output_tokens, cost_micros, outcome, created_at)
     select 'ten_bench_' || lpad((1 + i % $2::int)::text, 5, '0'), 'debit', 0, 0, 'request', 'old-' || i,
            'key_bench_' || lpad((1 + i % $2::int)::text, 5, '0'), 'bench/mock', 1, 1, 0, 'completed', now() - interval '1 day'
       from generate_series(1, $1::int) i`,
    [ledgerRows, T],
  );
}
await seed.query('vacuum analyze');
await seed.end();
const tenantId = (i: number) => `ten_bench_${String(1 + (i % T)).padStart(5, '0')}`;
const keyId = (i: number) => `key_bench_${String(1 + (i % T)).padStart(5, '0')}`;

// The door's pool commits holds asynchronously (src/gateway/main.ts); the metering consumer does not.
const doorDb = createPool(url, 1, { asyncCommit: true });
const meterDb = createPool(url, 1);
const door = await doorDb.connect();
const meter = await meterDb.connect();
const doorPid = (await door.query('select pg_backend_pid() as pid')).rows[0].pid as number;
const meterPid = (await meter.query('select pg_backend_pid() as pid')).rows[0].pid as number;

let seq = 0;
let tenantSeq = 0;
/** requests admitted ('ok') whose hold is still open, oldest first */
const open: AdmitRequest[] = [];
let settled = 0;
let released = 0;
let settleCalls = 0;
let releaseCalls = 0;

/** Settles (or releases) the oldest admitted requests until at most `keep` are open. */
async function drain(keep: number, meterCpu: { ms: number }, doorCpu: { ms: number }) {
  while (open.length > keep) {
    const n = Math.min(settleSize, open.length - keep);
    const batch = open.splice(0, n);
    const toSettle: Settlement[] = [];
    for (const r of batch) {
      const i = Number(r.requestId.slice(4));
      if (releaseEvery > 0 && i % releaseEvery === 0) {
        // the request never reached a worker: the door releases its hold
        const c0 = backendCpuSeconds(doorPid);
        await releaseHold(door, r.requestId);
        doorCpu.ms += (backendCpuSeconds(doorPid) - c0) * 1000;
        released++;
        releaseCalls++;
      } else toSettle.push(benchSettlement(i, { requestId: r.requestId, tenantId: r.tenantId, keyId: r.keyId }));
    }
    if (toSettle.length > 0) {
      const c0 = backendCpuSeconds(meterPid);
      const results = await settleBatch(meter, toSettle);
      meterCpu.ms += (backendCpuSeconds(meterPid) - c0) * 1000;
      settleCalls++;
      settled += results.filter((r) => r.status === 'settled').length;
    }
  }
}

function nextCall(k: number): AdmitRequest[] {
  const t = tenantSeq++;
  return Array.from({ length: k }, () => ({
    requestId: `req_${String(seq++).padStart(10, '0')}`,
    tenantId: tenantId(t),
    keyId: keyId(t),
    min: MIN,
    max: MAX,
    ttlMs: TTL,
  }));
}

async function admitCall(items: AdmitRequest[]) {
  return items.length === 1 ? [await admit(door, items[0])] : admitBatch(door, items);
}

/** Admits `total` requests in calls of k, settling behind them; returns the measurements. */
async function run(k: number, total: number) {
  const doorCpu = { ms: 0 };
  const meterCpu = { ms: 0 };
  const releaseCpu = { ms: 0 };
  let admitted = 0;
  let calls = 0;
  let wallMs = 0;
  settled = released = settleCalls = releaseCalls = 0;
  for (let done = 0; done < total; done += k) {
    const items = nextCall(k);
    const c0 = backendCpuSeconds(doorPid);
    const t0 = performance.now();
    const results = await admitCall(items);
    wallMs += performance.now() - t0;
    doorCpu.ms += (backendCpuSeconds(doorPid) - c0) * 1000;
    calls++;
    for (let j = 0; j < items.length; j++) {
      if (results[j].status !== 'ok') throw new Error(`${items[j].requestId}: ${results[j].status}`);
      open.push(items[j]);
      admitted++;
    }
    if (open.length >= inflight + settleSize) await drain(inflight, meterCpu, releaseCpu);
  }
  return { admitted, calls, wallMs, doorCpu: doorCpu.ms, meterCpu: meterCpu.ms, releaseCpu: releaseCpu.ms, settled, released, settleCalls, releaseCalls };
}

const us = (ms: number, n: number) => ((ms * 1000) / Math.max(1, n)).toFixed(1);
// /proc CPU is in 10 ms ticks: per-call deltas are summed, so their error averages out over thousands of calls.
for (const k of sizes) {
  await run(k, warmup);
  const r = await run(k, requests);
  console.log(
    `${k === 1 ? 'catraca_admit      ' : `catraca_admit_batch of ${String(k).padEnd(2)}`}: ${r.admitted} admitted in ${r.calls} calls | ` +
      `door backend CPU ${us(r.doorCpu, r.admitted)} µs/request, wall ${(r.wallMs / r.calls).toFixed(3)} ms/call | ` +
      `release ${us(r.releaseCpu, r.releaseCalls)} µs/call (${r.releaseCalls}) | settle ${us(r.meterCpu, r.settled)} µs/request (${r.settleCalls} batches) | ` +
      `admit+release+settle ${us(r.doorCpu + r.releaseCpu + r.meterCpu, r.admitted)} µs/request`,
  );
}

// Lease open + close (the path a busy key takes once per window), on the door's connection.
{
  const n = 2000;
  const c0 = backendCpuSeconds(doorPid);
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const lease = `lease_bench_${i}`;
    const o = await openLease(door, { leaseId: lease, tenantId: tenantId(i), keyId: keyId(i), amount: 10n ** 8n, richness: 4, ttlMs: TTL });
    if (o.status !== (values['key-limit'] ? 'per_request' : 'ok')) throw new Error(`lease ${lease}: ${o.status}`);
    await closeLease(door, lease, 0n);
  }
  const cpu = (backendCpuSeconds(doorPid) - c0) * 1000;
  console.log(`lease open + close: ${n} pairs | door backend CPU ${us(cpu, n)} µs/pair, wall ${((performance.now() - t0) / n).toFixed(3)} ms/pair`);
}

// The metering consumer's sweep, every 10 s: catraca_sweep_holds (nothing or a few expired) and the
// open-holds gauge (every hold read once).
{
  const n = 300;
  let swept = 0;
  let c = 0;
  let t = 0;
  let cg = 0;
  let tg = 0;
  for (let i = 0; i < n; i++) {
    // a few holds of requests whose worker died, expired
    await door.query(
      `with h as (insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at)
                  select 'dead-' || $1::int || '-' || g, $2, $3, 1000, now() - interval '1 s' from generate_series(1, 3) g returning tenant_id, key_id, amount_micros)
       , t as (update tenants set held_micros = held_micros + 3000 where id = $2)
       update api_keys set held_micros = held_micros + 3000 where id = $3`,
      [i, tenantId(i), keyId(i)],
    );
    let c0 = backendCpuSeconds(meterPid);
    let t0 = performance.now();
    swept += await sweepExpiredHolds(meter);
    c += backendCpuSeconds(meterPid) - c0;
    t += performance.now() - t0;
    c0 = backendCpuSeconds(meterPid);
    t0 = performance.now();
    await openHolds(meter);
    cg += backendCpuSeconds(meterPid) - c0;
    tg += performance.now() - t0;
  }
  const holds = (await meter.query('select count(*)::int as n from holds')).rows[0].n;
  console.log(
    `sweeper (${holds} open holds): catraca_sweep_holds ${us(c * 1000, n)} µs/call, wall ${(t / n).toFixed(3)} ms/call (${swept} swept) | ` +
      `openHolds ${us(cg * 1000, n)} µs/call, wall ${(tg / n).toFixed(3)} ms/call`,
  );
}

if (values.explain) {
  const show = await explainCalls(door);
  for (const k of sizes) {
    await show(k === 1 ? 'catraca_admit' : `catraca_admit_batch of ${k}`, async () => {
      const items = nextCall(k);
      await admitCall(items);
      for (const it of items) await door.query('select catraca_release($1)', [it.requestId]);
    });
  }
  await show('catraca_release', async () => {
    const [it] = nextCall(1);
    await admit(door, it);
    await releaseHold(door, it.requestId);
  });
  let l = 0;
  await show('catraca_lease_open + catraca_lease_close', async () => {
    const lease = `lease_explain_${l++}`;
    await openLease(door, { leaseId: lease, tenantId: tenantId(l), keyId: keyId(l), amount: 10n ** 8n, richness: 4, ttlMs: TTL });
    await closeLease(door, lease, 0n);
  });
  await show('catraca_sweep_holds', async () => {
    await door.query(
      `insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at) values ('dead-x-' || $1::int, $2, $3, 0, now() - interval '1 s')`,
      [l++, tenantId(l), keyId(l)],
    );
    await sweepExpiredHolds(door);
  });
  await show('openHolds', () => openHolds(door));
}
door.release();
meter.release();
await doorDb.end();
await meterDb.end();
