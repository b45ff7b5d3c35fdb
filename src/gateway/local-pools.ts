import type { NatsConnection } from 'nats';
import type { Config } from '../config.ts';
import type { ModelSource } from '../catalog/catalog.ts';
import type { Logger } from '../log.ts';
import type { Tracer } from '../tracing/tracer.ts';
import { createTurnOutbox } from '../runner/outbox.ts';
import { JobRunner } from '../runner/runner.ts';
import { monitorWorker } from '../runner/monitoring.ts';
import { defaultConcurrency, openFileLimit } from '../runner/capacity.ts';
import { tracerFromEnv } from '../tracing/tracer.ts';
import type { Metrics } from '../metrics/registry.ts';
import type { StreamRouter } from './stream-router.ts';

// The front door's own worker lane (GATEWAY_LOCAL_POOLS): the pools listed there are served in
// this process by the same worker code (adapters, keepalives, deadline, cancel, billing rule,
// usage to JetStream with msgID = request id), but a job is a function call and its frames go
// straight to the stream router. No job request, no frame, no cancel crosses NATS, so a token
// wakes one process (this one) instead of three (worker, nats-server, front door). When the lane
// is full or draining, jobs go to the pool's worker processes over NATS as before.

export function localPools(config: Config): string[] {
  return [
    ...new Set(
      config.GATEWAY_LOCAL_POOLS.split(',')
        .map((p) => p.trim())
        .filter(Boolean),
    ),
  ];
}

export interface LocalPools {
  worker: JobRunner;
  /** Stops taking jobs, lets the running ones finish (or cuts them at DRAIN_TIMEOUT_MS), flushes usage. */
  stop(): Promise<void>;
}

/**
 * Starts the lane when GATEWAY_LOCAL_POOLS names pools. It is also a `catraca-worker` NATS micro
 * service (so `catraca status` counts its capacity and in-flight jobs per pool) and adds its
 * figures to the door's own `/metrics`.
 */
export async function startLocalPools(opts: {
  config: Config;
  nc: NatsConnection;
  catalog: ModelSource;
  router: StreamRouter;
  doorId: string;
  metrics: Metrics;
  /** a job of the lane ended (the dispatcher sends it a waiting job) */
  onFree: (pools: string[]) => void;
  tracer?: Tracer;
  log: Logger;
}): Promise<LocalPools | undefined> {
  const pools = localPools(opts.config);
  if (pools.length === 0) return undefined;
  let onJobEnd: ((ms: number) => void) | undefined;
  let onFirstToken: ((ms: number) => void) | undefined;
  const worker = await JobRunner.start({
    pools,
    nc: opts.nc,
    id: `${opts.doorId}-local`,
    config: opts.config,
    keepaliveMs: opts.config.KEEPALIVE_MS,
    // each in-process stream holds two sockets here: the client's and the vendor's
    concurrency:
      opts.config.GATEWAY_LOCAL_CONCURRENCY || opts.config.WORKER_CONCURRENCY || defaultConcurrency(opts.config.WORKER_STREAM_MEMORY_MB, openFileLimit(), 2),
    drainTimeoutMs: opts.config.DRAIN_TIMEOUT_MS,
    catalog: opts.catalog,
    tracer: opts.tracer ?? tracerFromEnv('catraca-worker'),
    log: opts.log,
    outbox: createTurnOutbox((subject, data, headers) => opts.router.deliverLocal(subject, Buffer.from(data), headers?.traceparent)),
    onFree: () => opts.onFree(pools),
    onJobEnd: (ms) => onJobEnd?.(ms),
    onFirstToken: (ms) => onFirstToken?.(ms),
  });
  const monitoring = await monitorWorker(opts.nc, worker.id, () => worker.stats());
  onJobEnd = monitoring.jobEnded;
  onFirstToken = monitoring.firstToken;
  const m = opts.metrics;
  m.counter('catraca_local_jobs_accepted_total', 'Jobs this front door ran in its own process (GATEWAY_LOCAL_POOLS)', {}, () => worker.stats().accepted);
  m.gauge('catraca_local_jobs_in_flight', 'Jobs running in this front door', {}, () => worker.stats().inFlight);
  m.gauge('catraca_local_capacity', 'Jobs this front door runs at once before it sends them to worker processes', {}, () => worker.stats().concurrency);
  m.gauge('catraca_usage_pending', 'Usage messages not yet stored by JetStream (publishes being retried included)', {}, () => worker.stats().usagePending);
  opts.log.info('in-process pools', { pools, capacity: worker.stats().concurrency });
  return {
    worker,
    async stop() {
      await monitoring.stop().catch(() => {});
      await worker.stop();
    },
  };
}
