import { hostname } from 'node:os';
import type { NatsConnection, Service } from 'nats';
import { encode } from './messages.ts';
import { eventLoopDelay, type Metrics, type MetricsSnapshot } from '../metrics/registry.ts';

export {
  bucketQuantile,
  createMetrics,
  DEFAULT_BUCKETS_SECONDS,
  renderPrometheus,
  seriesKey,
  type Counter,
  type Gauge,
  type Histogram,
  type HistogramSummary,
  type Labels,
  type MetricFamily,
  type Metrics,
  type MetricsSnapshot,
} from '../metrics/registry.ts';

// NATS service monitoring of every catraca process. The metrics registry (src/metrics/registry.ts)
// is exposed
//   - over NATS as a nats.js micro service (`$SRV.PING|INFO|STATS[.<name>[.<id>]]`): the
//     registry's snapshot is the `data` of the service's one endpoint in `$SRV.STATS`, and the
//     same snapshot answers a request on `catraca.monitor.<instance>` (the endpoint's subject);
//   - as Prometheus text on `/metrics` (src/metrics/http.ts), on each process's METRICS_PORT.
// `catraca status` (src/cli/status.ts) discovers every instance through `$SRV.STATS`.
//
// Headline metrics. Every process registers these four under these exact names, so `catraca
// status` can print one uniform table; what a "job" is depends on the process.
//
// | name                     | type      | gateway                       | worker                      | metering                          |
// |--------------------------|-----------|-------------------------------|-----------------------------|-----------------------------------|
// | catraca_inflight         | gauge     | open client requests/streams  | jobs streaming upstream     | usage messages being settled      |
// | catraca_jobs_total       | counter   | requests answered (any status)| jobs finished (any outcome) | usage messages settled (acked)    |
// | catraca_errors_total     | counter   | 5xx answers + mid-stream errs | jobs ended in error         | settle failures (nak/term)        |
// | catraca_latency_seconds  | histogram | request total time            | upstream total time         | metering lag: ended_at → committed|
//
// Further names in use (a process registers what applies to it; labels in braces):
//
// | name                                  | type      | process  | meaning                                              |
// |---------------------------------------|-----------|----------|------------------------------------------------------|
// | catraca_http_responses_total          | counter   | gateway  | {status} responses by HTTP status                    |
// | catraca_ttft_seconds                  | histogram | gateway  | request received → first content byte to client      |
// | catraca_admit_seconds                 | histogram | gateway  | admission (hold or lease) round trip                 |
// | catraca_admissions_total              | counter   | gateway  | {via="lease"|"hold"} requests admitted               |
// | catraca_leases_opened_total           | counter   | gateway  | balance leases opened                                |
// | catraca_leases_open                   | gauge     | gateway  | balance leases this front door admits from now       |
// | catraca_jobs_accepted_total           | counter   | worker   | jobs accepted                                        |
// | catraca_no_responders_total           | counter   | gateway  | jobs with no worker listening (503)                  |
// | catraca_dispatch_waiting              | gauge     | gateway  | {pool} jobs waiting for a worker slot                |
// | catraca_dispatch_wait_seconds         | histogram | gateway  | {pool} wait of jobs that had to wait                 |
// | catraca_jobs_refused_total            | counter   | worker   | {code} busy                                          |
// | catraca_worker_capacity               | gauge     | worker   | jobs this worker runs at once, at most               |
// | catraca_usage_pending                 | gauge     | worker   | usage messages not yet stored by JetStream           |
// | catraca_metering_lag_seconds          | histogram | metering | usage ended_at → ledger row committed                |
// | catraca_usage_settled_total           | counter   | metering | {status} settled / duplicate                         |
// | catraca_usage_backlog_messages        | gauge     | metering | USAGE messages not yet settled (pending + unacked)   |
// | catraca_usage_backlog_alarm           | gauge     | metering | 1 while the backlog exceeds USAGE_BACKLOG_ALARM      |
// | catraca_open_holds                    | gauge     | metering | holds not yet settled or swept                       |
// | catraca_holds_swept_total             | counter   | metering | expired holds released by the sweeper                |
// | catraca_responses_expired_total       | counter   | metering | stored responses deleted after their retention       |
//
// `$SRV.STATS` carries the snapshot (histogram figures in seconds); `/metrics` adds the standard
// process and runtime figures (`process_*`, `nodejs_*`, see processMetrics()).

export const HEADLINE = {
  inflight: 'catraca_inflight',
  jobs: 'catraca_jobs_total',
  errors: 'catraca_errors_total',
  latency: 'catraca_latency_seconds',
} as const;

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

  const data = (): InstanceStatsData => {
    const mem = process.memoryUsage();
    const cpu = process.cpuUsage();
    let extra: Record<string, unknown> = {};
    try {
      extra = opts.extra?.() ?? {};
    } catch (err) {
      extra = { error: (err as Error).message };
    }
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
        event_loop_p99_ms: round3(eventLoopDelay().p99 * 1000),
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
      await svc.stop();
    },
  };
}

const round3 = (v: number) => Math.round(v * 1000) / 1000;

/** One deployment of a model as one runner sees it (a worker's $SRV.STATS `deployments`). */
export interface DeploymentHealthView {
  model: string;
  deployment: string;
  name: string;
  healthy: boolean;
  circuit: 'closed' | 'open' | 'half_open';
  cooldown_ms: number;
  consecutive_failures: number;
  served: number;
  failed: number;
  ttft_ms: number | null;
  tokens_per_second: number | null;
  last_error: string | null;
}
