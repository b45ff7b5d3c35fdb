import { readdirSync } from 'node:fs';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';

// The in-process metrics registry of every catraca process: counters, gauges and histograms with
// labels, rendered as Prometheus text (exposition format 0.0.4) for `/metrics` and summarized as a
// JSON snapshot for `$SRV.STATS` (src/bus/monitoring.ts). No dependency: a few hundred lines do it.
//
// Naming follows Prometheus' conventions: base units (durations in seconds, `_seconds`; sizes in
// bytes, `_bytes`), counters end in `_total`, a histogram's buckets are in its unit. Snapshot
// rates (`rates`) are increments per second over about the last 10 seconds (10 one-second slots,
// the current partial second included; over the age of the registry while it is younger).
//
// Process and runtime figures (`process_*`, `nodejs_*`) come from `processMetrics()`: a registry
// of their own, read from node's APIs at scrape time, rendered after the process's own figures.

/**
 * Default histogram bucket upper bounds, in seconds (100 µs to 2 min): about 1.5× apart, so a
 * quantile interpolated inside a bucket is within ~±20 % (a stream of ~110 ms lands in
 * (0.1, 0.15], not (0.1, 0.25]).
 */
export const DEFAULT_BUCKETS_SECONDS: readonly number[] = [
  0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1,
  1.5, 2, 3, 5, 10, 30, 60, 120,
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
  /** `read`, when given, is called at snapshot time: a counter kept elsewhere (it must never decrease). */
  counter(name: string, help: string, labels?: Labels, read?: () => number): Counter;
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
export function bucketQuantile(q: number, bounds: readonly number[], counts: readonly number[], min: number, max: number): number {
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

/** A counter incremented in this process (with a per-second ring for its rate), or one read from its source. */
function newCounter(name: string, now: () => number, read?: () => number): { counter: Counter; slots?: Float64Array; secs?: Float64Array } {
  if (read)
    return {
      counter: {
        inc() {
          throw new Error(`counter ${name} is read from its source; it cannot be incremented`);
        },
        get value() {
          return read();
        },
      },
    };
  const slots = new Float64Array(RATE_SLOTS);
  const secs = new Float64Array(RATE_SLOTS).fill(-1);
  let value = 0;
  const counter: Counter = {
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
  return { counter, slots, secs };
}

function newGauge(read?: () => number): Gauge {
  let value = 0;
  return {
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
}

function newHistogram(name: string, bounds: readonly number[]): Histogram {
  for (let i = 1; i < bounds.length; i++) if (!(bounds[i]! > bounds[i - 1]!)) throw new Error(`histogram ${name}: bounds must increase`);
  const b = [...bounds];
  const counts = new Array<number>(b.length + 1).fill(0);
  let count = 0;
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  return {
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
}

type RateSource = { key: string; slots: Float64Array; secs: Float64Array };

function snapshotOf(families: Iterable<MetricFamily>, rateSources: RateSource[], created: number, t: number): MetricsSnapshot {
  const snap: MetricsSnapshot = { uptime_s: round3((t - created) / 1000), counters: {}, rates: {}, gauges: {}, histograms: {} };
  const nowSec = Math.floor(t / 1000);
  const windowS = Math.min(RATE_SLOTS, Math.max(1, (t - created) / 1000));
  for (const f of families) {
    for (const s of f.series) {
      const key = seriesKey(f.name, s.labels);
      if (f.type === 'counter') snap.counters[key] = (s.metric as Counter).value;
      else if (f.type === 'gauge') snap.gauges[key] = (s.metric as Gauge).value;
      else {
        const h = s.metric as Histogram;
        snap.histograms[key] = {
          count: h.count,
          sum: round6(h.sum),
          min: round6(h.min),
          max: round6(h.max),
          p50: round6(h.quantile(0.5)),
          p90: round6(h.quantile(0.9)),
          p99: round6(h.quantile(0.99)),
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
}

export function createMetrics(opts: { now?: () => number } = {}): Metrics {
  const now = opts.now ?? Date.now;
  const created = now();
  const families = new Map<string, MetricFamily>();
  const rateSources: RateSource[] = [];

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
    counter(name, help, labels = {}, read) {
      const f = family(name, help, 'counter');
      const { key, found } = existing(f, labels);
      if (found) return found.metric as Counter;
      const { counter, slots, secs } = newCounter(name, now, read);
      if (slots && secs) rateSources.push({ key, slots, secs });
      f.series.push({ labels: { ...labels }, metric: counter });
      return counter;
    },
    gauge(name, help, labels = {}, read) {
      const f = family(name, help, 'gauge');
      const { found } = existing(f, labels);
      if (found) return found.metric as Gauge;
      const g = newGauge(read);
      f.series.push({ labels: { ...labels }, metric: g });
      return g;
    },
    histogram(name, help, labels = {}, bounds = DEFAULT_BUCKETS_SECONDS) {
      const f = family(name, help, 'histogram');
      const { found } = existing(f, labels);
      if (found) return found.metric as Histogram;
      const h = newHistogram(name, bounds);
      f.series.push({ labels: { ...labels }, metric: h });
      return h;
    },
    snapshot() {
      return snapshotOf(families.values(), rateSources, created, now());
    },
    families() {
      return [...families.values()];
    },
  };
}

const round3 = (v: number) => Math.round(v * 1000) / 1000;
/** histogram figures are in seconds: kept to the microsecond */
const round6 = (v: number) => Math.round(v * 1e6) / 1e6;

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}
function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}
export function fmt(v: number): string {
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
 * Several registries render one after the other (a name must belong to one of them only).
 */
export function renderPrometheus(metrics: Metrics | readonly Metrics[], labels: Labels = {}): string {
  const out: string[] = [];
  for (const registry of Array.isArray(metrics) ? metrics : [metrics as Metrics]) {
    for (const f of registry.families()) {
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
  }
  return out.length ? out.join('\n') + '\n' : '';
}

// ---------------------------------------------------------------------- process and runtime

const LOOP_WINDOW_MS = 10_000;
let loop: { h: IntervalHistogram; last: { mean: number; p99: number; max: number } } | undefined;

/**
 * Event-loop delay (seconds) over the last ~10 s window: the current window once it has samples,
 * else the previous one. One monitor per process (node samples it in C++, every 10 ms).
 */
export function eventLoopDelay(): { mean: number; p99: number; max: number } {
  if (!loop) {
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    loop = { h, last: { mean: 0, p99: 0, max: 0 } };
    const state = loop;
    setInterval(() => {
      if (state.h.count > 0) state.last = read(state.h);
      state.h.reset();
    }, LOOP_WINDOW_MS).unref();
  }
  return loop.h.count > 0 ? read(loop.h) : loop.last;
}
const read = (h: IntervalHistogram) => ({ mean: h.mean / 1e9, p99: h.percentile(99) / 1e9, max: h.max / 1e9 });

function openFds(): number | null {
  try {
    return readdirSync('/proc/self/fd').length - 1; // less the directory handle readdir opened
  } catch {
    return null;
  }
}

let processRegistry: Metrics | undefined;

/**
 * The standard process and runtime figures, read from node at scrape time (the names prom-client
 * and the Prometheus client libraries use): CPU, memory, start time, open files, heap, event-loop
 * lag, versions. One registry per process, shared by every caller.
 */
export function processMetrics(version?: string): Metrics {
  if (processRegistry) return processRegistry;
  const m = createMetrics();
  const startTime = Math.round((Date.now() - process.uptime() * 1000) / 1000);
  m.counter('process_cpu_user_seconds_total', 'User CPU time spent, seconds', {}, () => process.cpuUsage().user / 1e6);
  m.counter('process_cpu_system_seconds_total', 'System CPU time spent, seconds', {}, () => process.cpuUsage().system / 1e6);
  m.counter('process_cpu_seconds_total', 'User and system CPU time spent, seconds', {}, () => {
    const c = process.cpuUsage();
    return (c.user + c.system) / 1e6;
  });
  m.gauge('process_start_time_seconds', 'Start time of the process since the Unix epoch, seconds', {}, () => startTime);
  m.gauge('process_resident_memory_bytes', 'Resident memory size, bytes', {}, () => process.memoryUsage.rss());
  if (openFds() !== null) m.gauge('process_open_fds', 'Open file descriptors', {}, () => openFds() ?? 0);
  m.gauge('nodejs_heap_size_total_bytes', 'V8 heap size, bytes', {}, () => process.memoryUsage().heapTotal);
  m.gauge('nodejs_heap_size_used_bytes', 'V8 heap used, bytes', {}, () => process.memoryUsage().heapUsed);
  m.gauge('nodejs_external_memory_bytes', 'Memory of C++ objects bound to JavaScript objects, bytes', {}, () => process.memoryUsage().external);
  eventLoopDelay();
  m.gauge('nodejs_eventloop_lag_seconds', 'Mean event-loop delay over the last ~10 s, seconds', {}, () => eventLoopDelay().mean);
  m.gauge('nodejs_eventloop_lag_p99_seconds', 'p99 event-loop delay over the last ~10 s, seconds', {}, () => eventLoopDelay().p99);
  m.gauge('nodejs_eventloop_lag_max_seconds', 'Largest event-loop delay over the last ~10 s, seconds', {}, () => eventLoopDelay().max);
  m.gauge('nodejs_version_info', 'Node.js version', { version: process.versions.node }, () => 1);
  if (version) m.gauge('catraca_build_info', 'catraca version', { version }, () => 1);
  return (processRegistry = m);
}
