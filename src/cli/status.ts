import { connect, RequestStrategy, type NatsConnection, type ServiceStats } from 'nats';
import pg from 'pg';
import { HEADLINE, type InstanceStatsData } from '../bus/monitoring.ts';
import { natsOptions, redactNatsUrl } from '../bus/connect.ts';
import { usageBacklog, type UsageBacklog } from '../bus/usage-stream.ts';
import { openHolds } from '../billing/ledger.ts';
import { formatBrl } from '../billing/money.ts';

// `catraca status [--json] [--watch] [--service gateway|worker|metering|portal] [--wait-ms MS]`
// Discovers every catraca instance through `$SRV.STATS` (nats.js micro services, see
// src/bus/monitoring.ts) and prints one row per instance, then per pool the workers, their jobs
// in flight and capacity and the jobs waiting in front doors; the USAGE backlog (metering's
// pending and unacknowledged messages, from JetStream); open holds and leases (count and sum,
// from PostgreSQL, when a database is known); and whether NATS and PostgreSQL answer.
// --json prints one object {ok, nats, postgres, usage, holds, pools, instances} (with --watch,
// one per refresh, one per line). --watch refreshes every second until Ctrl-C; it clears the
// screen only when stdout is a terminal (never an escape code in a pipe or a file).
// Exit code 0; 1 when NATS cannot be reached, no catraca instance answers, or PostgreSQL (when
// known) does not answer; 2 on a bad argument.

export interface InstanceRow {
  service: string;
  instance: string;
  id: string;
  version: string;
  host: string;
  pid: number | null;
  started: string;
  uptime_s: number;
  inflight: number | null;
  jobs_total: number | null;
  jobs_per_s: number | null;
  errors_total: number | null;
  latency_p50_ms: number | null;
  latency_p99_ms: number | null;
  rss_mib: number | null;
  event_loop_p99_ms: number | null;
  counters: Record<string, number>;
  rates: Record<string, number>;
  gauges: Record<string, number>;
  histograms: InstanceStatsData['histograms'];
  extra: Record<string, unknown>;
}

const CATRACA = /^catraca-/;
/** seconds (the histograms' unit) → ms to the µs */
const ms = (seconds: number) => Math.round(seconds * 1e6) / 1000;

/** Sum of every series of a metric (`name` and `name{…}`). */
function sumSeries(rec: Record<string, number> | undefined, name: string): number | null {
  if (!rec) return null;
  let found = false;
  let s = 0;
  for (const [k, v] of Object.entries(rec)) {
    if (k === name || k.startsWith(name + '{')) {
      found = true;
      s += v;
    }
  }
  return found ? Math.round(s * 1000) / 1000 : null;
}

export function toRow(s: ServiceStats, now = Date.now()): InstanceRow {
  const d = (s.endpoints?.find((e) => e.name === 'metrics')?.data ?? null) as InstanceStatsData | null;
  const lat = d?.histograms?.[HEADLINE.latency];
  return {
    service: s.name,
    instance: d?.instance ?? s.metadata?.instance ?? s.id,
    id: s.id,
    version: s.version,
    host: d?.host ?? s.metadata?.host ?? '',
    pid: d?.pid ?? (s.metadata?.pid ? Number(s.metadata.pid) : null),
    started: s.started,
    uptime_s: Math.max(0, Math.round((now - Date.parse(s.started)) / 1000)),
    inflight: sumSeries(d?.gauges, HEADLINE.inflight),
    jobs_total: sumSeries(d?.counters, HEADLINE.jobs),
    jobs_per_s: sumSeries(d?.rates, HEADLINE.jobs),
    errors_total: sumSeries(d?.counters, HEADLINE.errors),
    latency_p50_ms: lat ? ms(lat.p50) : null,
    latency_p99_ms: lat ? ms(lat.p99) : null,
    rss_mib: d?.process ? Math.round((d.process.rss_bytes / 2 ** 20) * 10) / 10 : null,
    event_loop_p99_ms: d?.process ? d.process.event_loop_p99_ms : null,
    counters: d?.counters ?? {},
    rates: d?.rates ?? {},
    gauges: d?.gauges ?? {},
    histograms: d?.histograms ?? {},
    extra: d?.extra ?? {},
  };
}

export async function collectInstances(nc: NatsConnection, opts: { service?: string; waitMs?: number } = {}): Promise<InstanceRow[]> {
  const client = nc.services.client({ strategy: RequestStrategy.JitterTimer, maxWait: opts.waitMs ?? 1000 });
  const rows: InstanceRow[] = [];
  const now = Date.now();
  try {
    for await (const s of await client.stats(opts.service ?? '')) {
      if (!CATRACA.test(s.name)) continue;
      rows.push(toRow(s, now));
    }
  } catch (err) {
    // nobody subscribes to $SRV.STATS at all: the server answers "no responders" (503)
    if ((err as { code?: string }).code !== '503') throw err;
  }
  rows.sort((a, b) => a.service.localeCompare(b.service) || a.instance.localeCompare(b.instance));
  return rows;
}

function uptime(s: number): string {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, '0')}h`;
}

const dash = (v: number | null) => (v === null ? '-' : String(v));

export function formatTable(rows: InstanceRow[]): string {
  const head = ['SERVICE', 'INSTANCE', 'HOST', 'PID', 'UPTIME', 'IN-FLIGHT', 'JOBS', 'JOBS/S', 'ERRORS', 'P50 MS', 'P99 MS', 'RSS MIB', 'LOOP P99'];
  const body = rows.map((r) => [
    r.service.replace(/^catraca-/, ''),
    r.instance,
    r.host,
    dash(r.pid),
    uptime(r.uptime_s),
    dash(r.inflight),
    dash(r.jobs_total),
    dash(r.jobs_per_s),
    dash(r.errors_total),
    dash(r.latency_p50_ms),
    dash(r.latency_p99_ms),
    dash(r.rss_mib),
    dash(r.event_loop_p99_ms),
  ]);
  const all = [head, ...body];
  const numeric = new Set([3, 5, 6, 7, 8, 9, 10, 11, 12]);
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const lines = all.map((r) =>
    r
      .map((c, i) => (numeric.has(i) ? c.padStart(w[i]!) : c.padEnd(w[i]!)))
      .join('  ')
      .trimEnd(),
  );
  if (!rows.length) lines.push('(no catraca instance answered on $SRV.STATS)');
  return lines.join('\n');
}

export interface PoolRow {
  pool: string;
  /** worker instances serving the pool */
  workers: number;
  /** jobs running on those workers for this pool */
  inflight: number;
  /** the sum of the workers' concurrency limits (a worker's limit is shared by its pools) */
  capacity: number;
  /** jobs waiting in front doors for a worker slot of this pool */
  waiting: number;
}

/** Per pool: workers, in flight, capacity (from the workers' $SRV.STATS) and waiting jobs (from the front doors'). */
export function poolRows(rows: InstanceRow[]): PoolRow[] {
  const pools = new Map<string, PoolRow>();
  const get = (pool: string) => {
    let p = pools.get(pool);
    if (!p) pools.set(pool, (p = { pool, workers: 0, inflight: 0, capacity: 0, waiting: 0 }));
    return p;
  };
  for (const r of rows) {
    if (r.service === 'catraca-worker') {
      const names = Array.isArray(r.extra.pools) ? (r.extra.pools as string[]) : [];
      const byPool = (r.extra.inflight_by_pool ?? {}) as Record<string, number>;
      const capacity = typeof r.extra.capacity === 'number' ? r.extra.capacity : (r.gauges.catraca_worker_capacity ?? 0);
      for (const name of names) {
        const p = get(name);
        p.workers++;
        p.inflight += byPool[name] ?? 0;
        p.capacity += capacity;
      }
    } else if (r.service === 'catraca-gateway') {
      for (const [k, v] of Object.entries(r.gauges)) {
        const m = /^catraca_dispatch_waiting\{pool="([^"]*)"\}$/.exec(k);
        if (m) get(m[1]!).waiting += v;
      }
    }
  }
  return [...pools.values()].sort((a, b) => a.pool.localeCompare(b.pool));
}

export interface StatusReport {
  /** false when NATS is unreachable, no instance answered, or PostgreSQL (when known) did not answer */
  ok: boolean;
  nats: { ok: boolean; url: string; server?: string; rtt_ms?: number; error?: string };
  postgres: { ok: boolean; url: string; rtt_ms?: number; error?: string } | null;
  usage:
    | { messages: number; pending: number | null; ack_pending: number | null; stream_bytes: number; max_bytes: number; retention: string }
    | { error: string }
    | null;
  holds: { holds: number; held: string; leases: number; leased: string } | null;
  pools: PoolRow[];
  instances: InstanceRow[];
}

function usageOut(b: UsageBacklog) {
  return { messages: b.messages, pending: b.pending, ack_pending: b.ackPending, stream_bytes: b.streamBytes, max_bytes: b.maxBytes, retention: b.retention };
}

/** Everything `catraca status` shows, collected once. */
export async function collectStatus(
  nc: NatsConnection,
  opts: { natsUrl: string; db?: pg.Pool; databaseUrl?: string; service?: string; waitMs?: number },
): Promise<StatusReport> {
  const t0 = performance.now();
  let rtt: number | undefined;
  try {
    await nc.flush();
    rtt = Math.round((performance.now() - t0) * 100) / 100;
  } catch {}
  const nats: StatusReport['nats'] = { ok: rtt !== undefined && !nc.isClosed(), url: redactNatsUrl(opts.natsUrl), server: nc.info?.version, rtt_ms: rtt };
  const [instances, usage, pgPart] = await Promise.all([
    collectInstances(nc, { service: opts.service, waitMs: opts.waitMs }),
    usageBacklog(nc).then(usageOut, (err: Error) => ({ error: /not found/i.test(err.message) ? 'the USAGE stream does not exist yet' : err.message })),
    (async (): Promise<{ postgres: StatusReport['postgres']; holds: StatusReport['holds'] }> => {
      if (!opts.db) return { postgres: null, holds: null };
      const url = redactUrl(opts.databaseUrl ?? '');
      const p0 = performance.now();
      try {
        const open = await openHolds(opts.db);
        return {
          postgres: { ok: true, url, rtt_ms: Math.round((performance.now() - p0) * 100) / 100 },
          holds: { holds: open.holds.count, held: formatBrl(open.holds.micros), leases: open.leases.count, leased: formatBrl(open.leases.micros) },
        };
      } catch (err) {
        return { postgres: { ok: false, url, error: (err as Error).message || String((err as { code?: string }).code ?? err) }, holds: null };
      }
    })(),
  ]);
  const ok = nats.ok && instances.length > 0 && (pgPart.postgres === null || pgPart.postgres.ok);
  return { ok, nats, postgres: pgPart.postgres, usage, holds: pgPart.holds, pools: poolRows(instances), instances };
}

function table(head: string[], body: string[][], numeric: Set<number>): string[] {
  const all = [head, ...body];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  return all.map((r) =>
    r
      .map((c, i) => (numeric.has(i) ? c.padStart(w[i]!) : c.padEnd(w[i]!)))
      .join('  ')
      .trimEnd(),
  );
}

/** The human report: health, usage backlog, holds, pools, then the instance table. Plain text, no escape codes. */
export function formatReport(r: StatusReport): string {
  const out: string[] = [];
  out.push(
    `NATS        ${r.nats.ok ? 'ok' : 'DOWN'}  ${r.nats.url}${r.nats.server ? `  (nats-server ${r.nats.server}, rtt ${r.nats.rtt_ms} ms)` : ''}${r.nats.error ? `  ${r.nats.error}` : ''}`,
  );
  if (r.postgres)
    out.push(`PostgreSQL  ${r.postgres.ok ? 'ok' : 'DOWN'}  ${r.postgres.url}${r.postgres.ok ? `  (rtt ${r.postgres.rtt_ms} ms)` : `  ${r.postgres.error}`}`);
  else out.push('PostgreSQL  -  (no DATABASE_URL and no running stack: holds not shown)');
  if (r.usage && 'error' in r.usage) out.push(`Usage       ${r.usage.error}`);
  else if (r.usage) {
    const u = r.usage;
    out.push(
      `Usage       ${u.messages} waiting to be settled` +
        (u.pending === null ? ' (no metering consumer yet)' : ` (metering: ${u.pending} pending, ${u.ack_pending} unacknowledged)`) +
        `; stream ${u.stream_bytes} of ${u.max_bytes < 0 ? 'unlimited' : u.max_bytes} bytes, retention ${u.retention}`,
    );
  }
  if (r.holds) out.push(`Holds       ${r.holds.holds} open, R$ ${r.holds.held}; leases ${r.holds.leases} open, R$ ${r.holds.leased}`);
  if (r.pools.length) {
    out.push('');
    out.push(
      ...table(
        ['POOL', 'WORKERS', 'IN-FLIGHT', 'CAPACITY', 'WAITING'],
        r.pools.map((p) => [p.pool, String(p.workers), String(p.inflight), String(p.capacity), String(p.waiting)]),
        new Set([1, 2, 3, 4]),
      ),
    );
  }
  out.push('');
  out.push(formatTable(r.instances));
  return out.join('\n');
}

/** postgres://user:secret@host/db → postgres://user:***@host/db */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/:\/\/([^:/@]+):[^@]*@/, '://$1:***@');
  }
}

const USAGE = `usage: catraca status [--json] [--watch] [--service gateway|worker|metering|portal] [--wait-ms MS]`;

export async function runStatus(ctx: { natsUrl: string; databaseUrl?: string | null; json: boolean; args: string[]; isTTY?: boolean }): Promise<number> {
  let watch = false;
  let service: string | undefined;
  let waitMs = 1000;
  let json = ctx.json;
  for (let i = 0; i < ctx.args.length; i++) {
    const a = ctx.args[i]!;
    if (a === '--watch' || a === '-w') watch = true;
    else if (a === '--json') json = true;
    else if (a === '--service') {
      const s = ctx.args[++i];
      if (!s) {
        process.stderr.write(`--service needs a value\n${USAGE}\n`);
        return 2;
      }
      service = s.startsWith('catraca-') ? s : `catraca-${s}`;
    } else if (a === '--wait-ms') waitMs = Number(ctx.args[++i]);
    else if (a === '--help' || a === '-h') {
      process.stdout.write(USAGE + '\n');
      return 0;
    } else {
      process.stderr.write(`unknown argument ${a}\n${USAGE}\n`);
      return 2;
    }
  }
  if (!Number.isFinite(waitMs) || waitMs <= 0) {
    process.stderr.write(`--wait-ms must be a positive number\n`);
    return 2;
  }
  const tty = ctx.isTTY ?? process.stdout.isTTY === true;
  let nc: NatsConnection;
  try {
    nc = await connect({ ...natsOptions(ctx.natsUrl), name: 'catraca status', timeout: 3000 });
  } catch (err) {
    const message = `cannot reach NATS at ${redactNatsUrl(ctx.natsUrl)}: ${(err as Error).message}`;
    if (json) process.stdout.write(JSON.stringify({ ok: false, nats: { ok: false, url: redactNatsUrl(ctx.natsUrl), error: (err as Error).message } }) + '\n');
    process.stderr.write(message + '\n');
    return 1;
  }
  const db = ctx.databaseUrl ? new pg.Pool({ connectionString: ctx.databaseUrl, max: 1, connectionTimeoutMillis: 3000 }) : undefined;
  db?.on('error', () => {});
  try {
    let lastOk = false;
    const once = async () => {
      const report = await collectStatus(nc, { natsUrl: ctx.natsUrl, db, databaseUrl: ctx.databaseUrl ?? undefined, service, waitMs });
      lastOk = report.ok;
      if (json) process.stdout.write(JSON.stringify(report) + '\n');
      else {
        // clear the screen between refreshes on a terminal only; a pipe gets plain separated reports
        if (watch) process.stdout.write((tty ? '\x1b[2J\x1b[H' : '\n') + new Date().toISOString() + '\n');
        process.stdout.write(formatReport(report) + '\n');
      }
      if (!report.ok && !watch) {
        const why = !report.nats.ok ? 'NATS does not answer' : report.instances.length === 0 ? 'no catraca instance answered' : 'PostgreSQL does not answer';
        process.stderr.write(`catraca status: ${why}\n`);
      }
    };
    if (!watch) {
      await once();
      return lastOk ? 0 : 1;
    }
    let stop = false;
    const onSig = () => {
      stop = true;
    };
    process.once('SIGINT', onSig);
    process.once('SIGTERM', onSig);
    try {
      while (!stop) {
        const t = Date.now();
        await once();
        const rest = 1000 - (Date.now() - t);
        // sleep in small steps so Ctrl-C ends promptly
        for (let waited = 0; !stop && waited < rest; waited += 50) await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      process.off('SIGINT', onSig);
      process.off('SIGTERM', onSig);
    }
    return lastOk ? 0 : 1;
  } finally {
    await nc.close();
    await db?.end().catch(() => {});
  }
}
