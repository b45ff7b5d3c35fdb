import { createId } from '@paralleldrive/cuid2';
import type { Msg, NatsConnection, NatsError, Subscription } from 'nats';
import { connectBus, ensureUsageStream } from '../src/bus/connect.ts';
import { decodeJson, encode, type Job, JobSchema, type JobAck, type UsageMessage } from '../src/bus/messages.ts';
import { type AbortWhy, type JobContext, type JobCounters, type Running, runJob } from './job.ts';
import { LatencyRing, type LatencySummary } from './latency-ring.ts';
import { UsagePublisher } from './usage-publisher.ts';
import { subjects } from '../src/bus/subjects.ts';
import { type Config, loadConfig } from '../src/config.ts';
import { createLogger, type Logger } from '../src/log.ts';
import { type AdapterRegistry, createRegistry } from './adapters/registry.ts';
import { RequestMux } from '../src/bus/requests.ts';
import { Catalog, type CatalogEntry, type ModelSource } from '../src/catalog/catalog.ts';
import { createPool, type Db } from '../src/db/pool.ts';
import { createOutbox, type Outbox } from './outbox.ts';
import { tracerFromEnv, type Tracer } from '../src/tracing/tracer.ts';
import { defaultConcurrency } from './capacity.ts';

// One worker process: queue-group subscriber of each of its pools, bounded concurrency, frames
// to the front door, exactly one usage message per accepted job to JetStream (msgID = request id).
// A job itself runs in job.ts; usage publishing is usage-publisher.ts.

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
  /**
   * In-process lane (a front door running pools itself, `GATEWAY_LOCAL_POOLS`): no job or cancel
   * subscriptions, jobs arrive through `offer()`, frames go to `outbox` instead of NATS. Usage
   * still goes to JetStream.
   */
  inProcess?: { outbox: Outbox /** a job ended: the lane has a free slot */; onFree?: () => void };
}

export type { LatencySummary };

export interface WorkerStats {
  id: string;
  pools: string[];
  draining: boolean;
  concurrency: number;
  inFlight: number;
  /** in-flight jobs per pool (the concurrency limit is shared by the worker's pools) */
  inFlightByPool: Record<string, number>;
  accepted: number;
  completed: number;
  failed: number;
  cancelled: number;
  busy: number;
  invalid: number;
  /** Usage messages not yet acknowledged by JetStream. */
  usagePending: number;
  usagePublishRetries: number;
  /** From accepting the job to the first token, over the last 1024 jobs that produced one. */
  firstTokenMs: LatencySummary;
}

export interface WorkerHandle {
  id: string;
  nc: NatsConnection;
  stop(): Promise<void>;
  stats(): WorkerStats;
  /** Runs a job this process priced itself (in-process lane): the ack, and the job started when it is ok. */
  offer(job: Job, model: CatalogEntry, pool: string, traceparent?: string): JobAck;
  /** Stops a job of the in-process lane (the client left); it still bills what was generated. */
  cancel(requestId: string): void;
  /** Whether this worker serves `pool`. */
  serves(pool: string): boolean;
}

const DRAIN_TIMEOUT_MS = 30_000;
/** a worker announces free slots for this long after it last refused a job */
const CAPACITY_ANNOUNCE_MS = 10_000;

export function workerId(instance?: string): string {
  return instance ? instance.replace(/[^A-Za-z0-9_-]/g, '_') : `wrk_${createId()}`;
}

export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const config = options.config ?? loadConfig();
  const log = options.log ?? createLogger('worker');
  const id = options.id ? workerId(options.id) : workerId(config.CATRACA_INSTANCE);
  const concurrency = options.concurrency ?? (config.WORKER_CONCURRENCY || defaultConcurrency(config.WORKER_STREAM_MEMORY_MB));
  const keepaliveMs = options.keepaliveMs ?? config.KEEPALIVE_MS;
  const drainTimeoutMs = options.drainTimeoutMs ?? DRAIN_TIMEOUT_MS;
  const tracer = options.tracer ?? tracerFromEnv('catraca-worker');
  const registry = options.registry ?? createRegistry(config);
  const pools = [...new Set(options.pools.map((p) => p.trim()).filter(Boolean))];
  if (pools.length === 0) throw new Error('a worker needs at least one pool');

  const ownConnection = !options.nc;
  const nc = options.nc ?? (await connectBus(options.natsUrl ?? config.NATS_URL, `worker ${id} [${pools.join(',')}]`));
  await ensureUsageStream(nc);
  const requests = new RequestMux(nc);
  let ownDb: Db | undefined;
  let ownCatalog: Catalog | undefined;
  let catalog = options.catalog;
  if (!catalog) {
    ownDb = createPool(config.DATABASE_URL, 2);
    ownCatalog = new Catalog(ownDb);
    await ownCatalog.start(nc);
    catalog = ownCatalog;
  }
  const models: ModelSource = catalog;

  const inflight = new Map<string, Running>();
  const abortJob = (entry: Running, why: AbortWhy) => {
    if (!entry.why) {
      entry.why = why;
      entry.ac.abort(new Error(why));
    }
  };
  // One timer for every stream (not one per stream): keepalives whenever a stream has been quiet
  // for keepaliveMs, before and after the first token (they are the worker's liveness signal for
  // the front door's idle timeout), and the job's deadline.
  const sweepEvery = Math.max(10, Math.min(250, keepaliveMs > 0 ? Math.floor(keepaliveMs / 2) : 250));
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const entry of inflight.values()) {
      if (now >= entry.deadline) abortJob(entry, 'deadline');
      else if (keepaliveMs > 0 && entry.keepalive && now - entry.lastSent >= keepaliveMs) entry.keepalive();
    }
  }, sweepEvery);
  sweeper.unref();
  const counters: JobCounters = { accepted: 0, completed: 0, failed: 0, cancelled: 0, busy: 0, invalid: 0 };
  const firstToken = new LatencyRing();
  let draining = false;

  const usage = new UsagePublisher(nc, requests, log, config.USAGE_LINGER_MS);

  // The front door may be gone when a frame is published; the job still finishes and is billed.
  const outbox = options.inProcess?.outbox ?? createOutbox(nc, (err, subject) => log.debug('frame publish failed', { subject, err: err as Error }));
  const ctx: JobContext = {
    workerId: id,
    registry,
    outbox,
    usage,
    log,
    counters,
    recordFirstToken(ms) {
      options.onFirstToken?.(ms);
      firstToken.record(ms);
    },
    onJobEnd: options.onJobEnd,
  };

  // ---- one job ----
  // ---- subscriptions ----
  const respond = (msg: Msg, ack: JobAck) => {
    try {
      msg.respond(encode(ack));
    } catch {
      /* requester gone */
    }
  };

  /**
   * The worker's own catalog entry for a job, or why the job cannot be served: the entry must
   * exist, belong to this pool and have the fingerprint the front door priced the job with. A
   * disagreement is looked up again once (the catalog may have just changed).
   */
  const resolve = async (job: Job, pool: string): Promise<CatalogEntry | string> => {
    let model = await models.get(job.model.id);
    if (!model || model.fingerprint !== job.model.fingerprint) model = await models.fetch(job.model.id);
    if (!model) return `Model ${job.model.id} is not in this worker's catalog.`;
    if (model.pool !== pool) return `Model ${job.model.id} belongs to pool ${model.pool}, not ${pool}.`;
    if (model.fingerprint !== job.model.fingerprint) return `The job's catalog entry for ${job.model.id} differs from this worker's.`;
    if (model.input_price.toString() !== job.model.input_price || model.output_price.toString() !== job.model.output_price) {
      return `The job's prices for ${job.model.id} differ from this worker's catalog.`;
    }
    return model;
  };

  const onJob = (pool: string) => (err: NatsError | null, msg: Msg) => {
    if (err || !msg.reply) return;
    const acceptedAt = Date.now();
    let job: Job;
    try {
      job = JobSchema.parse(decodeJson(msg.data));
    } catch {
      counters.invalid++;
      return respond(msg, { ok: false, code: 'invalid_job', message: 'The job does not match the Job schema.' });
    }
    resolve(job, pool).then(
      (model) => {
        if (typeof model === 'string') {
          counters.invalid++;
          log.warn('job refused', { request_id: job.request_id, pool, reason: model });
          return respond(msg, { ok: false, code: 'invalid_job', message: model });
        }
        const { ack, start } = admit(job, model, pool, acceptedAt, msg.headers?.get('traceparent'));
        // Ack first: frames published after it on the same connection arrive after it.
        respond(msg, ack);
        start?.();
      },
      (e) => {
        log.error('catalog lookup failed', { request_id: job.request_id, err: e as Error });
        respond(msg, { ok: false, code: 'busy', message: `Worker ${id} cannot read its catalog.` });
      },
    );
  };

  /** Takes a job or says why not; `start` runs it (after the caller has sent the ack). */
  const admit = (job: Job, model: CatalogEntry, pool: string, acceptedAt: number, parent?: string): { ack: JobAck; start?: () => void } => {
    if (draining) return { ack: { ok: false, code: 'draining', message: `Worker ${id} is shutting down.` } };
    if (inflight.size >= concurrency) {
      counters.busy++;
      lastRefusalAt = Date.now();
      return { ack: { ok: false, code: 'busy', message: `Worker ${id} is at its concurrency limit (${concurrency}).` } };
    }
    if (inflight.has(job.request_id)) {
      counters.invalid++;
      return { ack: { ok: false, code: 'invalid_job', message: `Request ${job.request_id} is already running here.` } };
    }
    counters.accepted++;
    return { ack: { ok: true, worker: id }, start: () => run(job, model, pool, acceptedAt, parent) };
  };

  const run = (job: Job, model: CatalogEntry, pool: string, acceptedAt: number, parent?: string) => {
    const span = tracer.startSpan('job', {
      parent,
      kind: 'consumer',
      attributes: { 'catraca.request_id': job.request_id, 'catraca.pool': pool, 'catraca.model': job.model.id, 'catraca.worker': id },
    });
    const entry: Running = { ac: new AbortController(), pool, span, deadline: job.deadline, lastSent: acceptedAt };
    inflight.set(job.request_id, entry);
    entry.done = runJob(ctx, job, model, pool, acceptedAt, entry)
      .catch((e) => {
        span.setStatus('error', 'job crashed');
        log.error('job crashed', { request_id: job.request_id, err: e as Error });
      })
      .finally(() => {
        span.end();
        inflight.delete(job.request_id);
        announceCapacity();
        options.inProcess?.onFree?.();
      });
  };

  // A worker that refused work recently tells the front doors (which keep such jobs waiting)
  // when it has free slots again: at most once per event-loop turn, for each of its pools.
  let lastRefusalAt = 0;
  let announcing = false;
  const announceCapacity = () => {
    if (announcing || draining || options.inProcess || Date.now() - lastRefusalAt > CAPACITY_ANNOUNCE_MS) return;
    announcing = true;
    setImmediate(() => {
      announcing = false;
      const free = concurrency - inflight.size;
      if (free <= 0 || draining) return;
      const data = encode({ worker: id, free });
      for (const pool of pools) nc.publish(subjects.capacity(pool), data);
    });
  };

  for (const adapter of registry.all()) await adapter.warmup?.();

  const cancel = (requestId: string) => {
    const entry = inflight.get(requestId);
    if (entry) abortJob(entry, 'cancel');
  };
  const jobSubs: Subscription[] = options.inProcess
    ? []
    : pools.flatMap((pool) => [
        nc.subscribe(subjects.job(pool), { queue: subjects.queueGroup(pool), callback: onJob(pool) }),
        // jobs sent to this worker alone, after it announced free slots
        nc.subscribe(subjects.jobDirect(pool, id), { callback: onJob(pool) }),
      ]);
  const cancelPrefix = subjects.cancel(id, '');
  const cancelSub = options.inProcess
    ? undefined
    : nc.subscribe(subjects.cancelWildcard(id), {
        callback: (err, msg) => {
          if (!err) cancel(msg.subject.slice(cancelPrefix.length));
        },
      });
  await nc.flush();
  log.info('worker started', { worker: id, pools, concurrency });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      draining = true;
      log.info('worker draining', { worker: id, inFlight: inflight.size });
      await Promise.all(jobSubs.map((s) => s.drain().catch(() => {})));
      const allDone = () => Promise.all([...inflight.values()].map((j) => j.done));
      if (inflight.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([allDone(), new Promise((r) => (timer = setTimeout(r, drainTimeoutMs)))]);
        clearTimeout(timer);
        if (inflight.size > 0) {
          log.warn('drain timeout: cutting in-flight streams', { worker: id, inFlight: inflight.size });
          for (const j of inflight.values()) abortJob(j, 'drain');
          await allDone();
        }
      }
      await usage.flushed();
      outbox.flush(); // the last frames, before the connection drains
      await cancelSub?.drain().catch(() => {});
      requests.close();
      clearInterval(sweeper);
      ownCatalog?.stop();
      if (!options.tracer) await tracer.shutdown();
      await ownDb?.end().catch(() => {});
      if (ownConnection) await nc.drain().catch(() => {});
      log.info('worker stopped', { worker: id });
    })());

  const stats = (): WorkerStats => {
    const byPool: Record<string, number> = Object.fromEntries(pools.map((p) => [p, 0]));
    for (const e of inflight.values()) byPool[e.pool] = (byPool[e.pool] ?? 0) + 1;
    return {
      id,
      pools,
      draining,
      concurrency,
      inFlight: inflight.size,
      inFlightByPool: byPool,
      ...counters,
      usagePending: usage.size,
      usagePublishRetries: usage.retries,
      firstTokenMs: firstToken.summary(),
    };
  };

  const offer = (job: Job, model: CatalogEntry, pool: string, traceparent?: string): JobAck => {
    if (!pools.includes(pool)) return { ok: false, code: 'invalid_job', message: `Worker ${id} does not serve pool ${pool}.` };
    const { ack, start } = admit(job, model, pool, Date.now(), traceparent);
    start?.();
    return ack;
  };

  return { id, nc, stop, stats, offer, cancel, serves: (pool) => pools.includes(pool) };
}
