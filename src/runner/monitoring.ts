import type { NatsConnection } from 'nats';
import { HEADLINE, registerMonitoring } from '../bus/monitoring.ts';
import { createMetrics } from '../metrics/registry.ts';
import { VERSION } from '../version.ts';
import type { DeploymentHealthView } from '../bus/monitoring.ts';
import type { WorkerStats } from './runner.ts';

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
  // each deployment this worker has called gets its series the first time it is seen
  const seen = new Set<string>();
  const healthOf = new Map<string, DeploymentHealthView>();
  const trackDeployments = (views: DeploymentHealthView[]) => {
    for (const v of views) {
      const key = `${v.model} ${v.deployment}`;
      healthOf.set(key, v);
      if (seen.has(key)) continue;
      seen.add(key);
      const labels = { model: v.model, deployment: v.name };
      metrics.gauge('catraca_deployment_healthy', '1 when the deployment may be called (no cooldown, circuit not open)', labels, () =>
        healthOf.get(key)?.healthy ? 1 : 0,
      );
      metrics.gauge(
        'catraca_deployment_cooldown_seconds',
        'Seconds until a cooling-down deployment may be called again',
        labels,
        () => (healthOf.get(key)?.cooldown_ms ?? 0) / 1000,
      );
      metrics.counter('catraca_deployment_served_total', 'Jobs a deployment served', labels, () => healthOf.get(key)?.served ?? 0);
      metrics.counter(
        'catraca_deployment_failures_total',
        'Failures that cooled a deployment down (429, 5xx, timeouts, unreachable)',
        labels,
        () => healthOf.get(key)?.failed ?? 0,
      );
    }
  };
  let last = stats();
  const timer = setInterval(() => {
    const now = stats();
    jobs.inc(now.completed + now.failed + now.cancelled - (last.completed + last.failed + last.cancelled));
    errors.inc(now.failed - last.failed);
    cancelled.inc(now.cancelled - last.cancelled);
    refusedBusy.inc(now.busy - last.busy);
    last = now;
    trackDeployments(now.deployments);
  }, 1000);
  timer.unref();
  const service = await registerMonitoring(nc, {
    name: 'catraca-worker',
    version: VERSION,
    instanceId: id,
    metrics,
    extra: () => {
      const s = stats();
      return { pools: s.pools, inflight_by_pool: s.inFlightByPool, capacity: s.concurrency, deployments: s.deployments, upstream_keys: s.upstreamKeys };
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
