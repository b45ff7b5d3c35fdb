import { connect, type NatsConnection } from 'nats';
import pg from 'pg';
import { collectInstances, deploymentRows, type DeploymentRow, type InstanceRow, type PoolRow, poolRows } from '../bus/instances.ts';
import { natsOptions, redactNatsUrl } from '../bus/connect.ts';
import { usageBacklog, type UsageBacklog } from '../bus/usage-stream.ts';
import { openHolds } from '../billing/ledger.ts';
import { formatBrl } from '../billing/money.ts';
import { redactUrl } from '../log.ts';
import { textTable } from './table.ts';
import { type Flags, parseFlags, str } from './args.ts';

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
  const lines = textTable(head, body, [3, 5, 6, 7, 8, 9, 10, 11, 12]);
  if (!rows.length) lines.push('(no catraca instance answered on $SRV.STATS)');
  return lines.join('\n');
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
  /** catalog models whose context length was never given: their prompt bounds are not capped (null: no PostgreSQL) */
  models_without_context_length: string[] | null;
  /** tenants whose admission is suspended (a shortfall, or an operator), with why (null: no PostgreSQL) */
  suspended_tenants: Array<{ id: string; reason: string | null }> | null;
  pools: PoolRow[];
  deployments: DeploymentRow[];
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
    (async (): Promise<Pick<StatusReport, 'postgres' | 'holds' | 'models_without_context_length' | 'suspended_tenants'>> => {
      if (!opts.db) return { postgres: null, holds: null, models_without_context_length: null, suspended_tenants: null };
      const url = redactUrl(opts.databaseUrl ?? '');
      const p0 = performance.now();
      try {
        const open = await openHolds(opts.db);
        const rtt_ms = Math.round((performance.now() - p0) * 100) / 100;
        const [unset, suspended] = await Promise.all([
          opts.db.query<{ id: string }>('select id from models where not context_length_set order by id'),
          opts.db.query<{ id: string; reason: string | null }>(
            'select id, suspended_reason as reason from tenants where suspended_at is not null order by suspended_at',
          ),
        ]);
        return {
          postgres: { ok: true, url, rtt_ms },
          holds: { holds: open.holds.count, held: formatBrl(open.holds.micros), leases: open.leases.count, leased: formatBrl(open.leases.micros) },
          models_without_context_length: unset.rows.map((r) => r.id),
          suspended_tenants: suspended.rows,
        };
      } catch (err) {
        return {
          postgres: { ok: false, url, error: (err as Error).message || String((err as { code?: string }).code ?? err) },
          holds: null,
          models_without_context_length: null,
          suspended_tenants: null,
        };
      }
    })(),
  ]);
  const ok = nats.ok && instances.length > 0 && (pgPart.postgres === null || pgPart.postgres.ok);
  return { ok, nats, ...pgPart, usage, pools: poolRows(instances), deployments: deploymentRows(instances), instances };
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
  if (r.models_without_context_length?.length)
    out.push(
      `Catalog     ${r.models_without_context_length.length} model(s) without a context length (their prompt bounds are not capped; set it with model set --context-length): ${r.models_without_context_length.join(', ')}`,
    );
  if (r.suspended_tenants?.length)
    out.push(`Suspended   ${r.suspended_tenants.map((t) => `${t.id} (${t.reason ?? 'no reason given'})`).join('; ')} — catraca tenant reactivate --id ID`);
  if (r.pools.length) {
    out.push('');
    out.push(
      ...textTable(
        ['POOL', 'WORKERS', 'IN-FLIGHT', 'CAPACITY', 'WAITING'],
        r.pools.map((p) => [p.pool, String(p.workers), String(p.inflight), String(p.capacity), String(p.waiting)]),
        new Set([1, 2, 3, 4]),
      ),
    );
  }
  if (r.deployments.length) {
    out.push('');
    out.push(
      ...textTable(
        ['MODEL', 'DEPLOYMENT', 'HEALTHY', 'CIRCUIT OPEN', 'SERVED', 'FAILED', 'LAST ERROR'],
        r.deployments.map((d) => [
          d.model,
          d.deployment,
          `${d.healthy}/${d.runners}`,
          String(d.circuits_open),
          String(d.served),
          String(d.failed),
          d.last_error ?? '-',
        ]),
        new Set([2, 3, 4, 5]),
      ),
    );
  }
  out.push('');
  out.push(formatTable(r.instances));
  return out.join('\n');
}

const USAGE = `usage: catraca status [--json] [--watch] [--service gateway|worker|metering|portal] [--wait-ms MS]`;

/** The options of `catraca status`, or the exit code of a usage error (2) or of --help (0). */
function statusOptions(args: string[], json: boolean): { watch: boolean; service?: string; waitMs: number; json: boolean } | number {
  let flags: Flags;
  try {
    flags = parseFlags(
      args.map((a) => (a === '-w' ? '--watch' : a)),
      { values: ['service', 'wait-ms'], booleans: ['watch'] },
      'status',
    );
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (flags.help) {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  const waitMs = flags['wait-ms'] === undefined ? 1000 : Number(flags['wait-ms']);
  if (!Number.isFinite(waitMs) || waitMs <= 0) {
    process.stderr.write(`--wait-ms must be a positive number\n`);
    return 2;
  }
  const s = str(flags, 'service');
  return { watch: flags.watch === true, service: s && (s.startsWith('catraca-') ? s : `catraca-${s}`), waitMs, json: json || flags.json === true };
}

/** Runs `once` every second until SIGINT or SIGTERM. */
async function everySecond(once: () => Promise<void>): Promise<void> {
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
}

export async function runStatus(ctx: { natsUrl: string; databaseUrl?: string | null; json: boolean; args: string[]; isTTY?: boolean }): Promise<number> {
  const opts = statusOptions(ctx.args, ctx.json);
  if (typeof opts === 'number') return opts;
  const { watch, service, waitMs, json } = opts;
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
    await everySecond(once);
    return lastOk ? 0 : 1;
  } finally {
    await nc.close();
    await db?.end().catch(() => {});
  }
}
