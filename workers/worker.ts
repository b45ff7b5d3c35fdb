import type { Msg, NatsConnection, NatsError, Subscription } from 'nats';
import { connectBus } from '../src/bus/connect.ts';
import { ACK_BY_HEADER, decodeJson, encode, type Job, JobSchema, type JobAck, type UsageMessage } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';
import type { ModelSource } from '../src/catalog/catalog.ts';
import { type Config, loadConfig } from '../src/config.ts';
import { createLogger, type Logger } from '../src/log.ts';
import type { AdapterRegistry } from '../src/providers/registry.ts';
import { defaultConcurrency } from '../src/runner/capacity.ts';
import { createOutbox } from '../src/runner/outbox.ts';
import { upstreamKeyEnv } from '../src/providers/registry.ts';
import { JobRunner, type LatencySummary, type WorkerStats, workerId } from '../src/runner/runner.ts';
import { VendorBatchService } from '../src/runner/vendor-batch.ts';
import { tracerFromEnv, type Tracer } from '../src/tracing/tracer.ts';

// One worker process's job runner hosted over NATS: a queue-group subscriber of each of its pools
// (and of jobs sent to it alone), cancels on its own subject, frames to the front door over NATS,
// free slots announced to the front doors that keep jobs waiting.

export interface WorkerOptions {
  pools: string[];
  /** Use this connection (left open by stop()). Otherwise the worker connects to `natsUrl`. */
  nc?: NatsConnection;
  natsUrl?: string;
  /** Subject-safe id; default CATRACA_INSTANCE or wrk_<cuid>. */
  id?: string;
  /** Settings; default loadConfig(). Individual fields below override it. */
  config?: Config;
  concurrency?: number;
  keepaliveMs?: number;
  /** How long stop() lets in-flight streams finish before cutting them (default 30 000 ms). */
  drainTimeoutMs?: number;
  registry?: AdapterRegistry;
  /** Where the worker resolves a job's model (upstream, key variable, bounds). Default: the catalog in DATABASE_URL, refreshed on NATS announcements. */
  catalog?: ModelSource;
  log?: Logger;
  /** Called when a job ends: ms from acceptance to its last frame, and its outcome (monitoring). */
  onJobEnd?: (ms: number, outcome: UsageMessage['outcome']) => void;
  /** One span per job (`job`), child of the front door's; default from OTEL_* (no export when unset). */
  tracer?: Tracer;
  /** Called at a job's first token: ms from acceptance (monitoring). */
  onFirstToken?: (ms: number) => void;
}

export type { LatencySummary, WorkerStats };
export { workerId };

export interface WorkerHandle {
  id: string;
  nc: NatsConnection;
  stop(): Promise<void>;
  stats(): WorkerStats;
}

const DRAIN_TIMEOUT_MS = 30_000;
/**
 * A job is refused when its ack could not reach the front door before the door stops waiting
 * (ACK_BY_HEADER): this long is left for the ack's way back. Clocks are NTP-synced (as for the
 * job's deadline).
 */
const ACK_TRANSIT_MS = 250;
/** a worker announces free slots for this long after it last refused a job */
const CAPACITY_ANNOUNCE_MS = 10_000;

export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const config = options.config ?? loadConfig();
  const log = options.log ?? createLogger('worker');
  const id = options.id ? workerId(options.id) : workerId(config.CATRACA_INSTANCE);
  const tracer = options.tracer ?? tracerFromEnv('catraca-worker');
  const ownConnection = !options.nc;
  const nc = options.nc ?? (await connectBus(options.natsUrl ?? config.NATS_URL, `worker ${id} [${options.pools.join(',')}]`));
  // The front door may be gone when a frame is published; the job still finishes and is billed.
  const outbox = createOutbox(nc, (err, subject) => log.debug('frame publish failed', { subject, err: err as Error }));
  let announceCapacity = () => {};
  const runner = await JobRunner.start({
    id,
    pools: options.pools,
    nc,
    config,
    concurrency: options.concurrency ?? (config.WORKER_CONCURRENCY || defaultConcurrency(config.WORKER_STREAM_MEMORY_MB)),
    keepaliveMs: options.keepaliveMs ?? config.KEEPALIVE_MS,
    drainTimeoutMs: options.drainTimeoutMs ?? DRAIN_TIMEOUT_MS,
    outbox,
    tracer,
    log,
    registry: options.registry,
    catalog: options.catalog,
    onFree: () => announceCapacity(),
    onJobEnd: options.onJobEnd,
    onFirstToken: options.onFirstToken,
  });
  announceCapacity = capacityAnnouncer(nc, runner);
  const subs = subscribe(nc, runner, log);
  // vendor batch mode (docs/batch.md): this worker holds its pools' deployment keys
  const vendorBatches = new VendorBatchService({
    nc,
    pools: runner.pools,
    workerId: id,
    catalog: runner.catalog,
    env: upstreamKeyEnv(config.WORKER_UPSTREAM_KEYS),
    log,
  });
  await nc.flush();
  log.info('worker started', { worker: id, pools: runner.pools, concurrency: runner.concurrency });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      runner.beginDrain();
      await Promise.all(subs.jobs.map((s) => s.drain().catch(() => {})));
      await vendorBatches.stop();
      await runner.stop();
      await subs.cancel.drain().catch(() => {});
      if (!options.tracer) await tracer.shutdown();
      if (ownConnection) await nc.drain().catch(() => {});
      log.info('worker stopped', { worker: id });
    })());
  return { id, nc, stop, stats: () => runner.stats() };
}

/** Job subscriptions (queue group per pool, and the worker's own subject per pool) and the cancel subscription. */
function subscribe(nc: NatsConnection, runner: JobRunner, log: Logger): { jobs: Subscription[]; cancel: Subscription } {
  const respond = (msg: Msg, ack: JobAck) => {
    try {
      msg.respond(encode(ack));
    } catch {
      /* requester gone */
    }
  };
  const onJob = (pool: string) => (err: NatsError | null, msg: Msg) => {
    if (err || !msg.reply) return;
    const acceptedAt = Date.now();
    let job: Job;
    try {
      job = JobSchema.parse(decodeJson(msg.data));
    } catch {
      runner.refused();
      return respond(msg, { ok: false, code: 'invalid_job', message: 'The job does not match the Job schema.' });
    }
    runner.resolve(job, pool).then(
      (model) => {
        if (typeof model === 'string') {
          runner.refused();
          log.warn('job refused', { request_id: job.request_id, pool, reason: model });
          return respond(msg, { ok: false, code: 'invalid_job', message: model });
        }
        const ackBy = Number(msg.headers?.get(ACK_BY_HEADER) || Number.POSITIVE_INFINITY);
        if (Date.now() > ackBy - ACK_TRANSIT_MS) {
          // the door answered 504 (or is about to): the client was told the request failed
          log.warn('job refused: it arrived after its front door stopped waiting for an ack', {
            request_id: job.request_id,
            pool,
            late_ms: Date.now() - ackBy,
          });
          return respond(msg, { ok: false, code: 'busy', message: `Worker ${runner.id} read the job after its front door stopped waiting.` });
        }
        const { ack, start } = runner.admit(job, model, pool, acceptedAt, msg.headers?.get('traceparent'));
        // Ack first: frames published after it on the same connection arrive after it.
        respond(msg, ack);
        start?.();
      },
      (e) => {
        log.error('catalog lookup failed', { request_id: job.request_id, err: e as Error });
        respond(msg, { ok: false, code: 'busy', message: `Worker ${runner.id} cannot read its catalog.` });
      },
    );
  };
  const jobs = runner.pools.flatMap((pool) => [
    nc.subscribe(subjects.job(pool), { queue: subjects.queueGroup(pool), callback: onJob(pool) }),
    // jobs sent to this worker alone, after it announced free slots
    nc.subscribe(subjects.jobDirect(pool, runner.id), { callback: onJob(pool) }),
  ]);
  const cancel = nc.subscribe(subjects.cancelWildcard(runner.id), {
    callback: (err, msg) => {
      const requestId = err ? null : subjects.parseCancel(msg.subject);
      if (requestId) runner.cancel(requestId);
    },
  });
  return { jobs, cancel };
}

// A worker that refused work recently tells the front doors (which keep such jobs waiting)
// when it has free slots again: at most once per event-loop turn, for each of its pools.
function capacityAnnouncer(nc: NatsConnection, runner: JobRunner): () => void {
  let announcing = false;
  return () => {
    if (announcing || runner.isDraining || Date.now() - runner.lastRefusalAt > CAPACITY_ANNOUNCE_MS) return;
    announcing = true;
    setImmediate(() => {
      announcing = false;
      const free = runner.concurrency - runner.inFlight;
      if (free <= 0 || runner.isDraining) return;
      const data = encode({ worker: runner.id, free });
      for (const pool of runner.pools) nc.publish(subjects.capacity(pool), data);
    });
  };
}
