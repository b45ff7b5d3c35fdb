// The portal's CSV exports of a large ledger: a fresh database, tenants with 10 000, 100 000 and
// 1 000 000 ledger rows over a year (and another tenant's rows beside them, so the index has to pick),
// the portal in this process, and each export downloaded over HTTP by a client that counts the rows and
// adds up the amounts as they stream (it keeps no more than a line). Reports for each size: time, rows
// and MB per second, and the process's resident memory before and at its peak (sampled every 10 ms):
// memory that stays flat from 10 000 to 1 000 000 rows is the point. --explain prints both queries'
// plans (EXPLAIN ANALYZE, BUFFERS) for the largest tenant, its year and one month.
//
//   npx tsx bench/export.ts [--sizes 10000,100000,1000000] [--explain] [--server postgres://postgres@127.0.0.1:5432]
//   node --expose-gc --max-old-space-size=64 --import tsx bench/export.ts --sizes 1000000
//
// The second: a heap far smaller than the file (192 MB for a million rows) and a full GC before and
// after each download, so that the RSS peak is what the export holds and not what V8 let pile up.
//
// Not for while tests run: it takes the database's and the machine's full attention for a minute.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { createSession, signUp } from '../src/portal/auth.ts';
import { exportQuery } from '../src/portal/exports.ts';
import { startPortal } from '../src/portal/server.ts';
import { freshDatabase } from './pg-bench.ts';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '10000,100000,1000000' },
    explain: { type: 'boolean', default: false },
    server: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432' },
    name: { type: 'string', default: 'catraca_export_bench' },
  },
});
const sizes = values.sizes!.split(',').map(Number);
const url = `${values.server}/${values.name}?application_name=export-bench`;
const FROM = '2025-01-01';
const TO = '2025-12-31';

await freshDatabase(values.server!, values.name!);
const db = createPool(url, 8);

/** A tenant with a signed-in user and n debits spread over the year (every 10th a credit), on 5 keys, 4 models, 50 end users. */
async function seed(n: number): Promise<{ tenantId: string; cookie: string }> {
  const signed = await signUp(db, { email: `bench.${n}.${Date.now()}@example.com`, password: 'senha-bem-longa-123', ip: '203.0.113.9', maxPerIp: 1000 });
  if (!signed.ok) throw new Error(`sign-up: ${signed.error}`);
  const tenantId = signed.user.tenant_id;
  const keys = [];
  for (let k = 0; k < 5; k++) keys.push((await createApiKey(db, { tenantId, label: `bench-key-${k}` })).record.id);
  await db.query(
    `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, external_id, key_id, model,
                         input_tokens, output_tokens, cached_tokens, reasoning_tokens, end_user, route, outcome, created_at)
     select $1, case when i % 10 = 0 then 'credit' else 'debit' end, 1000 + (i * 7919) % 90000, 0,
            case when i % 10 = 0 then 'pix' else 'request' end,
            case when i % 10 = 0 then null else 'req-' || $4 || '-' || i end,
            case when i % 10 = 0 then 'E' || $4 || '-' || i end,
            case when i % 10 = 0 then null else ($2::text[])[1 + i % 5] end,
            case when i % 10 = 0 then null else 'bench/model-' || (i % 4) end,
            case when i % 10 = 0 then null else 100 + i % 900 end, case when i % 10 = 0 then null else 50 + i % 400 end,
            case when i % 10 = 0 then null else i % 64 end, case when i % 10 = 0 then null else i % 32 end,
            case when i % 10 = 0 then null else 'user-' || (i % 50) end, 'chat', 'completed',
            '2025-01-01T03:00:00Z'::timestamptz + make_interval(secs => (i::double precision * 31535000 / $3))
       from generate_series(1, $3::bigint) as i`,
    [tenantId, keys, n, n],
  );
  const { token } = await createSession(db, signed.user.id);
  return { tenantId, cookie: `catraca_session=${token}` };
}

const started = Date.now();
const tenants = [];
for (const n of sizes) tenants.push({ n, ...(await seed(n)) });
// another tenant's year beside them
const other = await createTenant(db, 'bench-other');
await db.query(
  `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, created_at)
   select $1, 'credit', 1, 0, 'grant', '2025-01-01T03:00:00Z'::timestamptz + make_interval(secs => i * 60) from generate_series(1, 300000) i`,
  [other.id],
);
await db.query('vacuum analyze ledger');
console.log(`seeded ${sizes.join(' + ')} rows (+ 300000 of another tenant) in ${((Date.now() - started) / 1000).toFixed(1)} s`);

if (values.explain) {
  const biggest = tenants.at(-1)!;
  for (const [from, to] of [
    [FROM, TO],
    ['2025-06-01', '2025-06-30'],
  ])
    for (const name of ['statement', 'usage'] as const) {
      const q = exportQuery(name, biggest.tenantId, { from, to });
      const { rows } = await db.query(`explain (analyze, buffers, costs off) ${q.sql}`, q.params);
      console.log(`\n--- ${name} ${from} to ${to}, tenant of ${biggest.n} rows ---\n${rows.map((r) => r['QUERY PLAN']).join('\n')}`);
    }
}

const portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, registerWebhook: false, env: { PIX_PROVIDER: 'simulator' } });

/** Downloads one export, adding up its amounts line by line; the process's RSS sampled meanwhile. */
async function download(name: 'statement' | 'usage', cookie: string) {
  global.gc?.();
  const before = process.memoryUsage.rss();
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 10);
  const t0 = performance.now();
  const res = await fetch(`${portal.url}/exports/${name}.csv?from=${FROM}&to=${TO}`, { headers: { cookie } });
  if (res.status !== 200) throw new Error(`${name}: ${res.status}`);
  const amountField = name === 'statement' ? -5 : -1;
  let bytes = 0;
  let lines = 0;
  let sum = 0n;
  let rest = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    bytes += chunk.length;
    const parts = (rest + decoder.decode(chunk, { stream: true })).split('\r\n');
    rest = parts.pop()!;
    for (const line of parts) {
      if (lines++ === 0) continue;
      const a = line.split(',').at(amountField)!;
      const neg = a.startsWith('-');
      const [int, frac] = (neg ? a.slice(1) : a).split('.');
      const v = BigInt(int) * 1_000_000n + BigInt(frac);
      sum += neg ? -v : v;
    }
  }
  const ms = performance.now() - t0;
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage.rss());
  global.gc?.();
  return { rows: lines - 1, bytes, ms, sum, before, peak, heapAfter: process.memoryUsage().heapUsed };
}

const mb = (b: number) => (b / 1048576).toFixed(1);
console.log(
  `\nexport     ledger rows  file rows   MB     time s  rows/s    MB/s  RSS before MB  RSS peak MB  total == ledger${global.gc ? '  heap after gc MB' : ''}`,
);
for (const t of tenants) {
  const ledger = (
    await db.query(
      `select sum(case when kind = 'credit' then amount_micros else -amount_micros end)::bigint as net,
              coalesce(sum(amount_micros) filter (where kind = 'debit' and source = 'request'), 0)::bigint as spend
         from ledger where tenant_id = $1`,
      [t.tenantId],
    )
  ).rows[0];
  for (const name of ['statement', 'usage'] as const) {
    const r = await download(name, t.cookie);
    const ok = r.sum === (name === 'statement' ? ledger.net : ledger.spend);
    console.log(
      `${name.padEnd(10)} ${String(t.n).padStart(11)}  ${String(r.rows).padStart(9)}  ${mb(r.bytes).padStart(5)}  ${(r.ms / 1000).toFixed(2).padStart(7)}  ${Math.round(
        r.rows / (r.ms / 1000),
      )
        .toString()
        .padStart(
          7,
        )}  ${(r.bytes / 1048576 / (r.ms / 1000)).toFixed(1).padStart(5)}  ${mb(r.before).padStart(13)}  ${mb(r.peak).padStart(11)}  ${ok}${global.gc ? `  ${mb(r.heapAfter).padStart(16)}` : ''}`,
    );
  }
}

await portal.close();
await db.end();
const admin = new pg.Client({ connectionString: `${values.server}/postgres` });
await admin.connect();
await admin.query(`drop database if exists "${values.name}" with (force)`);
await admin.end();
