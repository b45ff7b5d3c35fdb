import { RequestStrategy, type NatsConnection, type ServiceStats } from 'nats';
import { type DeploymentHealthView, HEADLINE, type InstanceStatsData } from './monitoring.ts';

// Every running catraca instance as it reports itself over `$SRV.STATS` (nats.js micro services,
// see monitoring.ts), and what `catraca status` and the operator's console derive from them: per
// pool the workers, their jobs and capacity; per deployment of a model its health across runners.

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

/** One deployment of a model as the runners that called it see it. */
export interface DeploymentRow {
  model: string;
  deployment: string;
  /** runners (worker processes, doors' in-process pools) that called it */
  runners: number;
  /** of those, how many may call it now */
  healthy: number;
  /** open or half-open circuits among them */
  circuits_open: number;
  served: number;
  failed: number;
  last_error: string | null;
}

/** Per deployment, merged over the runners that report it in $SRV.STATS. */
export function deploymentRows(rows: InstanceRow[]): DeploymentRow[] {
  const out = new Map<string, DeploymentRow>();
  for (const r of rows) {
    if (r.service !== 'catraca-worker' || !Array.isArray(r.extra.deployments)) continue;
    for (const d of r.extra.deployments as DeploymentHealthView[]) {
      const key = `${d.model} ${d.name}`;
      let row = out.get(key);
      if (!row) out.set(key, (row = { model: d.model, deployment: d.name, runners: 0, healthy: 0, circuits_open: 0, served: 0, failed: 0, last_error: null }));
      row.runners++;
      if (d.healthy) row.healthy++;
      if (d.circuit !== 'closed') row.circuits_open++;
      row.served += d.served;
      row.failed += d.failed;
      row.last_error = d.last_error ?? row.last_error;
    }
  }
  return [...out.values()].sort((a, b) => a.model.localeCompare(b.model) || a.deployment.localeCompare(b.deployment));
}
