import { createMetrics, HEADLINE, type Counter, type Metrics } from '../bus/monitoring.ts';

/** The front door's figures, shared by `/metrics` (Prometheus) and `$SRV.STATS` (NATS). */
export function createGatewayMetrics(inFlight: () => number, openStreams: () => number) {
  const metrics: Metrics = createMetrics();
  metrics.gauge(HEADLINE.inflight, 'Open client requests and streams', {}, inFlight);
  metrics.gauge('catraca_open_streams', 'Requests with frames being relayed', {}, openStreams);
  const jobs = metrics.counter(HEADLINE.jobs, 'Requests answered (any status)');
  const errors = metrics.counter(HEADLINE.errors, '5xx answers and mid-stream errors');
  const latency = metrics.histogram(HEADLINE.latency, 'Request total time, ms');
  const ttft = metrics.histogram('catraca_ttft_ms', 'Request received to first content byte, ms');
  const admit = metrics.histogram('catraca_admit_ms', 'Hold (catraca_admit) round trip, ms');
  const noResponders = metrics.counter('catraca_no_responders_total', 'Jobs with no worker listening (503)');
  const byStatus = new Map<number, Counter>();

  return {
    metrics,
    answered(status: number, startedAt: number, ttfbMs: number | null) {
      jobs.inc();
      let c = byStatus.get(status);
      if (!c) byStatus.set(status, (c = metrics.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: String(status) })));
      c.inc();
      if (status >= 500) errors.inc();
      latency.observe(Date.now() - startedAt);
      if (ttfbMs !== null) ttft.observe(ttfbMs);
    },
    midStreamError: () => errors.inc(),
    admitted: (ms: number) => admit.observe(ms),
    noResponders: () => noResponders.inc(),
  };
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;
