import { connect, RequestStrategy, type NatsConnection, type ServiceStats } from 'nats';
import { HEADLINE, type InstanceStatsData } from '../bus/monitoring.ts';
import { natsOptions, redactNatsUrl } from '../bus/connect.ts';

// `catraca status [--json] [--watch] [--service gateway|worker|metering|portal] [--wait-ms MS]`
// Discovers every catraca instance through `$SRV.STATS` (nats.js micro services, see
// src/bus/monitoring.ts) and prints one row per instance. --json prints one object
// {instances:[…]} (with --watch, one object per refresh, one per line). --watch refreshes every
// second until Ctrl-C. Exit code 0, or 1 when NATS cannot be reached.

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
  for await (const s of await client.stats(opts.service ?? '')) {
    if (!CATRACA.test(s.name)) continue;
    rows.push(toRow(s, now));
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
  const lines = all.map((r) => r.map((c, i) => (numeric.has(i) ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join('  ').trimEnd());
  if (!rows.length) lines.push('(no catraca instance answered on $SRV.STATS)');
  return lines.join('\n');
}

const USAGE = `usage: catraca status [--json] [--watch] [--service gateway|worker|metering|portal] [--wait-ms MS]`;

export async function runStatus(ctx: { natsUrl: string; json: boolean; args: string[] }): Promise<number> {
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
  let nc: NatsConnection;
  try {
    nc = await connect({ ...natsOptions(ctx.natsUrl), name: 'catraca status', timeout: 3000 });
  } catch (err) {
    process.stderr.write(`cannot reach NATS at ${redactNatsUrl(ctx.natsUrl)}: ${(err as Error).message}\n`);
    return 1;
  }
  try {
    const once = async () => {
      const rows = await collectInstances(nc, { service, waitMs });
      if (json) process.stdout.write(JSON.stringify({ instances: rows }) + '\n');
      else {
        if (watch) process.stdout.write('\x1b[2J\x1b[H' + new Date().toISOString() + '\n');
        process.stdout.write(formatTable(rows) + '\n');
      }
    };
    if (!watch) {
      await once();
      return 0;
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
    return 0;
  } finally {
    await nc.close();
  }
}
