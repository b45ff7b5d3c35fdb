import type { NatsConnection } from 'nats';
import { HEADLINE, registerMonitoring } from '../src/bus/monitoring.ts';
import { createMetrics } from '../src/metrics/registry.ts';
import { VERSION } from '../src/version.ts';
import type { WorkerStats } from './worker.ts';

/**
 * Publishes a worker's figures as a NATS micro service. The worker keeps plain counters on its
 * hot path; this samples them once a second into the shared metrics registry.
 */
export async function monitorWorker(nc: NatsConnection, id: string, stats: () => WorkerStats) {
  const metrics = createMetrics();
  const latency = metrics.histogram(HEADLINE.latency, 'Job total time at the worker (accepted to last frame), seconds');
  metrics.gauge(HEADLINE.inflight, 'Jobs streaming upstream', {}, () => stats().inFlight);
  const jobs = metrics.counter(HEADLINE.jobs, 'Jobs finished (any outcome)');
  const errors = metrics.counter(HEADLINE.errors, 'Jobs ended in error');
  const refusedBusy = metrics.counter('catraca_jobs_refused_total', 'Refused jobs', { code: 'busy' });
  const cancelled = metrics.counter('catraca_jobs_cancelled_total', 'Jobs cancelled by the client');
  const ttft = metrics.histogram('catraca_upstream_ttft_seconds', 'Job accepted to its first token from the upstream, seconds');
  metrics.counter('catraca_jobs_accepted_total', 'Jobs accepted since the worker started', {}, () => stats().accepted);
  metrics.gauge('catraca_worker_capacity', 'Jobs this worker runs at once, at most (WORKER_CONCURRENCY)', {}, () => stats().concurrency);
  metrics.gauge('catraca_usage_pending', 'Usage messages not yet stored by JetStream (publishes being retried included)', {}, () => stats().usagePending);
  let last = stats();
  const timer = setInterval(() => {
    const now = stats();
    jobs.inc(now.completed + now.failed + now.cancelled - (last.completed + last.failed + last.cancelled));
    errors.inc(now.failed - last.failed);
    cancelled.inc(now.cancelled - last.cancelled);
    refusedBusy.inc(now.busy - last.busy);
    last = now;
  }, 1000);
  timer.unref();
  const service = await registerMonitoring(nc, {
    name: 'catraca-worker',
    version: VERSION,
    instanceId: id,
    metrics,
    extra: () => {
      const s = stats();
      return { pools: s.pools, inflight_by_pool: s.inFlightByPool, capacity: s.concurrency };
    },
  });
  return {
    metrics,
    /** Pass as startWorker's onJobEnd. */
    jobEnded: (ms: number) => latency.observe(ms / 1000),
    /** Pass as startWorker's onFirstToken. */
    firstToken: (ms: number) => ttft.observe(ms / 1000),
    async stop() {
      clearInterval(timer);
      await service.stop();
    },
  };
}
