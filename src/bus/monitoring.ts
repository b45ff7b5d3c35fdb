import { hostname } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { NatsConnection, Service } from 'nats';
import { encode } from './messages.ts';

// Monitoring for every catraca process: an in-process metrics registry, exposed
//   - over NATS as a nats.js micro service (`$SRV.PING|INFO|STATS[.<name>[.<id>]]`): the
//     registry's snapshot is the `data` of the service's one endpoint in `$SRV.STATS`, and the
//     same snapshot answers a request on `catraca.monitor.<instance>` (the endpoint's subject);
//   - as Prometheus text (exposition format 0.0.4) by `renderPrometheus`, for `/metrics`.
// `catraca status` (src/cli/status.ts) discovers every instance through `$SRV.STATS`.
//
// Headline metrics. Every process registers these four under these exact names, so `catraca
// status` can print one uniform table; what a "job" is depends on the process.
//
// | name                  | type      | gateway                       | worker                      | metering                          |
// |-----------------------|-----------|-------------------------------|-----------------------------|-----------------------------------|
// | catraca_inflight      | gauge     | open client requests/streams  | jobs streaming upstream     | usage messages being settled      |
// | catraca_jobs_total    | counter   | requests answered (any status)| jobs finished (any outcome) | usage messages settled (acked)    |
// | catraca_errors_total  | counter   | 5xx answers + mid-stream errs | jobs ended in error         | settle failures (nak/term)        |
// | catraca_latency_ms    | histogram | request total time            | upstream total time         | metering lag: ended_at → committed|
//
// Further names in use (a process registers what applies to it; labels in braces):
//
// | name                              | type      | process  | meaning                                              |
// |-----------------------------------|-----------|----------|------------------------------------------------------|
// | catraca_http_responses_total      | counter   | gateway  | {status} responses by HTTP status                    |
// | catraca_ttft_ms                   | histogram | gateway  | request received → first content byte to client      |
// | catraca_overhead_ms               | histogram | gateway  | time spent in the front door before publishing a job |
// | catraca_admit_ms                  | histogram | gateway  | hold (catraca_admit) round trip                      |
// | catraca_no_responders_total       | counter   | gateway  | jobs with no worker listening (503)                  |
// | catraca_upstream_ttft_ms          | histogram | worker   | upstream request sent → first delta                  |
// | catraca_upstream_errors_total     | counter   | worker   | {code} upstream failures by mapped code              |
// | catraca_jobs_refused_total        | counter   | worker   | {code} busy / draining / invalid_job                 |
// | catraca_metering_lag_ms           | histogram | metering | usage ended_at → ledger row committed                |
// | catraca_settled_total             | counter   | metering | {status} settled / duplicate / unknown_tenant        |
// | catraca_open_holds                | gauge     | metering | holds not yet settled or swept                       |
// | catraca_holds_swept_total         | counter   | metering | expired holds released by the sweeper                |
//
// Durations are milliseconds (the `_ms` suffix says so) because every latency goal of this
// project is stated in ms. Snapshot rates (`rates`) are increments per second over about the
// last 10 seconds (10 one-second slots, the current partial second included; over the age of
// the registry while it is younger than that).

export const HEADLINE = {
  inflight: 'catraca_inflight',
  jobs: 'catraca_jobs_total',
  errors: 'catraca_errors_total',
  latency: 'catraca_latency_ms',
} as const;

/**
 * Default histogram bucket upper bounds, in ms: about 1.5× apart, so a quantile interpolated
 * inside a bucket is within ~±20 % (a stream of ~110 ms lands in (100, 150], not (100, 250]).
 */
export const DEFAULT_BUCKETS_MS: readonly number[] = [
  0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750,
  1000, 1500, 2000, 3000, 5000, 10000, 30000, 60000, 120000,
];

export type Labels = Record<string, string>;

export interface Counter {
  inc(n?: number): void;
  readonly value: number;
}
export interface Gauge {
  set(v: number): void;
  inc(n?: number): void;
  dec(n?: number): void;
  readonly value: number;
}
export interface Histogram {
  observe(v: number): void;
  readonly bounds: readonly number[];
  /** per-bucket (not cumulative) counts; one more than bounds: the last is the +Inf bucket */
  readonly counts: readonly number[];
  readonly count: number;
  readonly sum: number;
  readonly min: number;
  readonly max: number;
  /** estimate from the buckets; see `bucketQuantile` */
  quantile(q: number): number;
}

export interface HistogramSummary {
  count: number;
  sum: number;
  min: number;
  max: number;
  p50: number;
  p90: number;
  p99: number;
}

export interface MetricsSnapshot {
  /** seconds since the registry was created */
  uptime_s: number;
  counters: Record<string, number>;
  rates: Record<string, number>;
  gauges: Record<string, number>;
  histograms: Record<string, HistogramSummary>;
}

export interface Metrics {
  counter(name: string, help: string, labels?: Labels): Counter;
  /** `read`, when given, is called at snapshot time instead of holding a set value. */
  gauge(name: string, help: string, labels?: Labels, read?: () => number): Gauge;
  histogram(name: string, help: string, labels?: Labels, bounds?: readonly number[]): Histogram;
  snapshot(): MetricsSnapshot;
  /** every registered series, grouped by metric name, in registration order */
  families(): MetricFamily[];
}

export interface MetricFamily {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  series: Array<{ labels: Labels; metric: Counter | Gauge | Histogram }>;
}

const NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const RATE_SLOTS = 10;

/** `name{a="x",b="y"}` with labels sorted by name; just `name` without labels. */
export function seriesKey(name: string, labels: Labels = {}): string {
  const keys = Object.keys(labels).sort();
  if (keys.length === 0) return name;
  return `${name}{${keys.map((k) => `${k}="${escapeLabel(labels[k]!)}"`).join(',')}}`;
}

/**
 * Quantile estimate from fixed buckets, as Prometheus' histogram_quantile does it: find the
 * bucket holding rank q·count, interpolate linearly inside it (the first bucket starts at 0).
 * Unlike Prometheus the result is clamped to the observed [min, max], and a rank in the +Inf
 * bucket returns the observed max. No observations → 0.
 */
export function bucketQuantile(
  q: number,
  bounds: readonly number[],
  counts: readonly number[],
  min: number,
  max: number,
): number {
  let total = 0;
  for (const c of counts) total += c;
  if (total === 0) return 0;
  const rank = q * total;
  let cum = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i]!;
    if (c > 0 && cum + c >= rank) {
      if (i === bounds.length) return max; // +Inf bucket
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      const upper = bounds[i]!;
      const v = lower + ((upper - lower) * (rank - cum)) / c;
      return Math.min(max, Math.max(min, v));
    }
    cum += c;
  }
  return max;
}

export function createMetrics(opts: { now?: () => number } = {}): Metrics {
  const now = opts.now ?? Date.now;
  const created = now();
  const families = new Map<string, MetricFamily>();
  const rateSources: Array<{ key: string; slots: Float64Array; secs: Float64Array }> = [];

  function family(name: string, help: string, type: MetricFamily['type']): MetricFamily {
    if (!NAME_RE.test(name)) throw new Error(`invalid metric name ${name}`);
    let f = families.get(name);
    if (!f) {
      f = { name, help, type, series: [] };
      families.set(name, f);
    } else if (f.type !== type) {
      throw new Error(`metric ${name} already registered as a ${f.type}`);
    }
    return f;
  }
  function existing(f: MetricFamily, labels: Labels) {
    for (const k of Object.keys(labels)) if (!LABEL_RE.test(k) || k === 'le') throw new Error(`invalid label name ${k}`);
    const key = seriesKey(f.name, labels);
    return { key, found: f.series.find((s) => seriesKey(f.name, s.labels) === key) };
  }

  return {
    counter(name, help, labels = {}) {
      const f = family(name, help, 'counter');
      const { key, found } = existing(f, labels);
      if (found) return found.metric as Counter;
      const slots = new Float64Array(RATE_SLOTS);
      const secs = new Float64Array(RATE_SLOTS).fill(-1);
      let value = 0;
      const c: Counter = {
        inc(n = 1) {
          value += n;
          const sec = Math.floor(now() / 1000);
          const i = sec % RATE_SLOTS;
          if (secs[i] !== sec) {
            secs[i] = sec;
            slots[i] = 0;
          }
          slots[i] += n;
        },
        get value() {
          return value;
        },
      };
      rateSources.push({ key, slots, secs });
      f.series.push({ labels: { ...labels }, metric: c });
      return c;
    },
    gauge(name, help, labels = {}, read) {
      const f = family(name, help, 'gauge');
      const { found } = existing(f, labels);
      if (found) return found.metric as Gauge;
      let value = 0;
      const g: Gauge = {
        set(v) {
          value = v;
        },
        inc(n = 1) {
          value += n;
        },
        dec(n = 1) {
          value -= n;
        },
        get value() {
          return read ? read() : value;
        },
      };
      f.series.push({ labels: { ...labels }, metric: g });
      return g;
    },
    histogram(name, help, labels = {}, bounds = DEFAULT_BUCKETS_MS) {
      const f = family(name, help, 'histogram');
      const { found } = existing(f, labels);
      if (found) return found.metric as Histogram;
      for (let i = 1; i < bounds.length; i++) if (!(bounds[i]! > bounds[i - 1]!)) throw new Error(`histogram ${name}: bounds must increase`);
      const b = [...bounds];
      const counts = new Array<number>(b.length + 1).fill(0);
      let count = 0;
      let sum = 0;
      let min = Infinity;
      let max = -Infinity;
      const h: Histogram = {
        observe(v) {
          // linear scan over ~32 bounds: cheap next to everything else a request does
          let i = 0;
          while (i < b.length && v > b[i]!) i++;
          counts[i]!++;
          count++;
          sum += v;
          if (v < min) min = v;
          if (v > max) max = v;
        },
        bounds: b,
        counts,
        get count() {
          return count;
        },
        get sum() {
          return sum;
        },
        get min() {
          return count ? min : 0;
        },
        get max() {
          return count ? max : 0;
        },
        quantile(q) {
          return bucketQuantile(q, b, counts, min, max);
        },
      };
      f.series.push({ labels: { ...labels }, metric: h });
      return h;
    },
    snapshot() {
      const t = now();
      const snap: MetricsSnapshot = { uptime_s: round3((t - created) / 1000), counters: {}, rates: {}, gauges: {}, histograms: {} };
      const nowSec = Math.floor(t / 1000);
      const windowS = Math.min(RATE_SLOTS, Math.max(1, (t - created) / 1000));
      for (const f of families.values()) {
        for (const s of f.series) {
          const key = seriesKey(f.name, s.labels);
          if (f.type === 'counter') snap.counters[key] = (s.metric as Counter).value;
          else if (f.type === 'gauge') snap.gauges[key] = (s.metric as Gauge).value;
          else {
            const h = s.metric as Histogram;
            snap.histograms[key] = {
              count: h.count,
              sum: round3(h.sum),
              min: round3(h.min),
              max: round3(h.max),
              p50: round3(h.quantile(0.5)),
              p90: round3(h.quantile(0.9)),
              p99: round3(h.quantile(0.99)),
            };
          }
        }
      }
      for (const r of rateSources) {
        let n = 0;
        for (let i = 0; i < RATE_SLOTS; i++) if (r.secs[i]! > nowSec - RATE_SLOTS) n += r.slots[i]!;
        snap.rates[r.key] = round3(n / windowS);
      }
      return snap;
    },
    families() {
      return [...families.values()];
    },
  };
}

const round3 = (v: number) => Math.round(v * 1000) / 1000;

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}
function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}
function fmt(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}
function labelText(labels: Labels, extra?: [string, string]): string {
  const parts = Object.keys(labels)
    .sort()
    .map((k) => `${k}="${escapeLabel(labels[k]!)}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

/**
 * Prometheus text exposition format 0.0.4 (`Content-Type: text/plain; version=0.0.4`).
 * `labels` are added to every series (e.g. `{instance: 'gw-1'}`); a series' own labels win.
 */
export function renderPrometheus(metrics: Metrics, labels: Labels = {}): string {
  const out: string[] = [];
  for (const f of metrics.families()) {
    out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`);
    out.push(`# TYPE ${f.name} ${f.type}`);
    for (const s of f.series) {
      const l = { ...labels, ...s.labels };
      if (f.type === 'histogram') {
        const h = s.metric as Histogram;
        let cum = 0;
        for (let i = 0; i < h.bounds.length; i++) {
          cum += h.counts[i]!;
          out.push(`${f.name}_bucket${labelText(l, ['le', fmt(h.bounds[i]!)])} ${cum}`);
        }
        out.push(`${f.name}_bucket${labelText(l, ['le', '+Inf'])} ${h.count}`);
        out.push(`${f.name}_sum${labelText(l)} ${fmt(h.sum)}`);
        out.push(`${f.name}_count${labelText(l)} ${h.count}`);
      } else {
        out.push(`${f.name}${labelText(l)} ${fmt((s.metric as Counter | Gauge).value)}`);
      }
    }
  }
  return out.length ? out.join('\n') + '\n' : '';
}

export type ServiceName = 'catraca-gateway' | 'catraca-worker' | 'catraca-metering' | 'catraca-portal';

/** What `$SRV.STATS` carries in `endpoints[0].data` for a catraca instance. */
export interface InstanceStatsData extends MetricsSnapshot {
  instance: string;
  host: string;
  pid: number;
  process: {
    rss_bytes: number;
    heap_used_bytes: number;
    /** CPU time used since the process started, ms */
    cpu_user_ms: number;
    cpu_system_ms: number;
    /** event-loop delay p99 over the last ~10 s, ms */
    event_loop_p99_ms: number;
  };
  extra: Record<string, unknown>;
}

export const monitorSubject = (instanceId: string) => `catraca.monitor.${instanceId}`;

/** Subject tokens may not contain `.`, `*`, `>` or whitespace. */
export function sanitizeInstanceId(id: string): string {
  return id.replace(/[^A-Za-z0-9_-]/g, '_') || 'instance';
}

export interface MonitoringOptions {
  name: ServiceName;
  version: string;
  instanceId: string;
  metrics: Metrics;
  description?: string;
  extra?: () => Record<string, unknown>;
}

/**
 * Registers this process as a nats.js micro service. `$SRV.PING|INFO|STATS` answer for it
 * (also `$SRV.STATS.<name>` and `$SRV.STATS.<name>.<service id>`); metadata carries
 * `instance`, `host`, `pid`. The service keeps working across reconnects (subscriptions are
 * re-established by nats.js); `stop()` drains its subscriptions.
 */
export async function registerMonitoring(nc: NatsConnection, opts: MonitoringOptions): Promise<{ stop(): Promise<void> }> {
  const instance = sanitizeInstanceId(opts.instanceId);
  const host = hostname();
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  let loopP99 = 0;
  const loopTimer = setInterval(() => {
    loopP99 = loop.percentile(99) / 1e6;
    loop.reset();
  }, 10000);
  loopTimer.unref();

  const data = (): InstanceStatsData => {
    const mem = process.memoryUsage();
    const cpu = process.cpuUsage();
    let extra: Record<string, unknown> = {};
    try {
      extra = opts.extra?.() ?? {};
    } catch (err) {
      extra = { error: (err as Error).message };
    }
    const current = loop.count > 0 ? loop.percentile(99) / 1e6 : 0;
    return {
      instance,
      host,
      pid: process.pid,
      ...opts.metrics.snapshot(),
      process: {
        rss_bytes: mem.rss,
        heap_used_bytes: mem.heapUsed,
        cpu_user_ms: Math.round(cpu.user / 1000),
        cpu_system_ms: Math.round(cpu.system / 1000),
        event_loop_p99_ms: round3(Math.max(loopP99, current)),
      },
      extra,
    };
  };

  const svc: Service = await nc.services.add({
    name: opts.name,
    version: opts.version,
    description: opts.description ?? `${opts.name} instance ${instance}`,
    metadata: { instance, host, pid: String(process.pid) },
    statsHandler: async () => data(),
  });
  svc.addEndpoint('metrics', {
    subject: monitorSubject(instance),
    // every instance answers its own subject; no queue group sharing between instances
    queue: instance,
    handler: (err, msg) => {
      if (err) return;
      msg.respond(encode(data()));
    },
  });
  return {
    async stop() {
      clearInterval(loopTimer);
      loop.disable();
      await svc.stop();
    },
  };
}
