import { HEADLINE } from '../bus/monitoring.ts';
import { createMetrics, type Counter, type Metrics } from '../metrics/registry.ts';
import type { KeyCache } from './key-cache.ts';

/** The front door's figures, shared by `/metrics` (Prometheus) and `$SRV.STATS` (NATS). */
export function createGatewayMetrics(
  inFlight: () => number,
  openStreams: () => number,
  admission?: { counts: { leased: number; perRequest: number; leasesOpened: number }; leases: number },
  waiting?: () => Record<string, number>,
  keys?: Pick<KeyCache, 'counts' | 'size' | 'negativeSize' | 'lookups'>,
) {
  const metrics: Metrics = createMetrics();
  metrics.gauge(HEADLINE.inflight, 'Open client requests and streams', {}, inFlight);
  metrics.gauge('catraca_open_streams', 'Requests with frames being relayed', {}, openStreams);
  const jobs = metrics.counter(HEADLINE.jobs, 'Requests answered (any status)');
  const errors = metrics.counter(HEADLINE.errors, '5xx answers and mid-stream errors');
  const latency = metrics.histogram(HEADLINE.latency, 'Request total time, seconds');
  const ttft = metrics.histogram('catraca_ttft_seconds', 'Request received to first content byte, seconds');
  const admit = metrics.histogram('catraca_admit_seconds', 'Admission (a hold, or a lease in memory) round trip, seconds');
  const noResponders = metrics.counter('catraca_no_responders_total', 'Jobs with no worker listening (503)');
  const byStatus = new Map<number, Counter>();
  const byRoute = new Map<string, Counter>();
  const waitedByPool = new Map<string, ReturnType<Metrics['histogram']>>();
  const waitingGauges = new Set<string>();
  if (admission) {
    const help = 'Requests admitted: via="lease" from a balance lease in memory (no PostgreSQL call), via="hold" with a hold of their own';
    metrics.counter('catraca_admissions_total', help, { via: 'lease' }, () => admission.counts.leased);
    metrics.counter('catraca_admissions_total', help, { via: 'hold' }, () => admission.counts.perRequest);
    metrics.counter('catraca_leases_opened_total', 'Balance leases opened by this front door', {}, () => admission.counts.leasesOpened);
    metrics.gauge('catraca_leases_open', 'Balance leases this front door admits from now', {}, () => admission.leases);
  }
  if (keys) {
    const lookups = 'PostgreSQL lookups of API keys by result (found, not_found, error)';
    for (const result of ['found', 'not_found', 'error'] as const) metrics.counter('catraca_key_lookups_total', lookups, { result }, () => keys.counts[result]);
    const refused =
      'Requests whose key was refused without a PostgreSQL lookup: negative_hit (an unknown key remembered), rate_limited (429: the client address is past GATEWAY_UNKNOWN_KEYS_PER_MINUTE), busy (503: every lookup busy)';
    for (const reason of ['negative_hit', 'rate_limited', 'busy'] as const)
      metrics.counter('catraca_key_refusals_total', refused, { reason }, () => keys.counts[reason]);
    const entries = 'Keys cached: positive (real keys) and negative (unknown keys remembered)';
    metrics.gauge('catraca_key_cache_entries', entries, { cache: 'positive' }, () => keys.size);
    metrics.gauge('catraca_key_cache_entries', entries, { cache: 'negative' }, () => keys.negativeSize);
    metrics.gauge('catraca_key_lookups_waiting', 'Key lookups waiting for a free lookup connection', {}, () => keys.lookups.waiting);
  }

  return {
    metrics,
    answered(status: number, startedAt: number, ttfbMs: number | null, route = 'other') {
      jobs.inc();
      let c = byStatus.get(status);
      if (!c) byStatus.set(status, (c = metrics.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: String(status) })));
      c.inc();
      const rk = `${route} ${status}`;
      let r = byRoute.get(rk);
      if (!r)
        byRoute.set(
          rk,
          (r = metrics.counter('catraca_route_responses_total', 'Responses by route (protocol) and HTTP status', { route, status: String(status) })),
        );
      r.inc();
      if (status >= 500) errors.inc();
      latency.observe((Date.now() - startedAt) / 1000);
      if (ttfbMs !== null) ttft.observe(ttfbMs / 1000);
    },
    midStreamError: () => errors.inc(),
    admitted: (ms: number) => admit.observe(ms / 1000),
    noResponders: () => noResponders.inc(),
    /** a job that waited for a worker slot got one after `ms` */
    waited(pool: string, ms: number) {
      let h = waitedByPool.get(pool);
      if (!h)
        waitedByPool.set(pool, (h = metrics.histogram('catraca_dispatch_wait_seconds', 'Wait for a worker slot of jobs that had to wait, seconds', { pool })));
      h.observe(ms / 1000);
    },
    /** registers the waiting-jobs gauge of each pool as it appears */
    trackPools() {
      for (const pool of Object.keys(waiting?.() ?? {})) {
        if (waitingGauges.has(pool)) continue;
        waitingGauges.add(pool);
        metrics.gauge('catraca_dispatch_waiting', 'Jobs waiting in this front door for a worker slot', { pool }, () => waiting?.()[pool] ?? 0);
      }
    },
  };
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;
