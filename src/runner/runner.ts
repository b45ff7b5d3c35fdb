import { createId } from '@paralleldrive/cuid2';
import type { NatsConnection } from 'nats';
import { ensureUsageStream } from '../bus/usage-stream.ts';
import type { Job, JobAck, UsageMessage } from '../bus/messages.ts';
import { RequestMux } from '../bus/requests.ts';
import { Catalog, type CatalogEntry, type ModelSource, pricesOf } from '../catalog/catalog.ts';
import { priceStrings, samePrices } from '../billing/money.ts';
import type { Config } from '../config.ts';
import { createPool, type Db } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { type AdapterRegistry, createRegistry, upstreamKeyEnv } from '../providers/registry.ts';
import type { Tracer } from '../tracing/tracer.ts';
import { type AbortWhy, type JobContext, type JobCounters, type Running, runJob } from './job.ts';
import type { DeploymentHealthView } from '../bus/monitoring.ts';
import { DeploymentHealth } from './deployments.ts';
import { LatencyRing, type LatencySummary } from './latency-ring.ts';
import type { Outbox } from './outbox.ts';
import { UsagePublisher } from './usage-publisher.ts';

// The job runner: what a worker process (workers/, jobs over NATS) and a front door's in-process
// pools (GATEWAY_LOCAL_POOLS, jobs as calls) both run. Bounded concurrency, one sweeper for
// keepalives and deadlines, one span per job, drain on stop, exactly one usage message per
// accepted job to JetStream. A job itself runs in job.ts; usage publishing is usage-publisher.ts.

export type { LatencySummary };

export interface WorkerStats {
  id: string;
  pools: string[];
  draining: boolean;
  concurrency: number;
  inFlight: number;
  /** in-flight jobs per pool (the concurrency limit is shared by the runner's pools) */
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
  /** each deployment this runner called: healthy, cooling down, circuit, speed */
  deployments: DeploymentHealthView[];
  /** the upstream key variables this runner may read (WORKER_UPSTREAM_KEYS): set (true) or empty; never their values */
  upstreamKeys: Record<string, boolean>;
}

export interface RunnerOptions {
  id: string;
  pools: string[];
  nc: NatsConnection;
  config: Config;
  concurrency: number;
  keepaliveMs: number;
  /** How long stop() lets in-flight streams finish before cutting them. */
  drainTimeoutMs: number;
  outbox: Outbox;
  tracer: Tracer;
  log: Logger;
  registry?: AdapterRegistry;
  /** Where the runner resolves a job's model. Default: the catalog in DATABASE_URL, refreshed on NATS announcements. */
  catalog?: ModelSource;
  /** A job ended: its runner has a free slot. */
  onFree?: () => void;
  /** Called when a job ends: ms from acceptance to its last frame, and its outcome (monitoring). */
  onJobEnd?: (ms: number, outcome: UsageMessage['outcome']) => void;
  /** Called at a job's first token: ms from acceptance (monitoring). */
  onFirstToken?: (ms: number) => void;
}

export function workerId(instance?: string): string {
  return instance ? instance.replace(/[^A-Za-z0-9_-]/g, '_') : `wrk_${createId()}`;
}

/** Takes jobs up to its concurrency, runs each through its vendor's adapter, bills each once. */
export class JobRunner {
  readonly id: string;
  readonly pools: string[];
  readonly concurrency: number;
  /** When the runner last refused a job for want of a slot (epoch ms). */
  lastRefusalAt = 0;
  private draining = false;
  private readonly inflight = new Map<string, Running>();
  private readonly counters: JobCounters = { accepted: 0, completed: 0, failed: 0, cancelled: 0, busy: 0, invalid: 0 };
  private readonly firstToken = new LatencyRing();
  /** what this runner has learnt of each deployment it called (cooldowns, circuits, speed) */
  readonly health = new DeploymentHealth();
  private readonly requests: RequestMux;
  private readonly usage: UsagePublisher;
  private readonly ctx: JobContext;
  private readonly sweeper: NodeJS.Timeout;
  private ownDb?: Db;
  private ownCatalog?: Catalog;
  private models!: ModelSource;
  private stopping?: Promise<void>;

  private constructor(private readonly o: RunnerOptions) {
    this.id = o.id;
    this.pools = [...new Set(o.pools.map((p) => p.trim()).filter(Boolean))];
    if (this.pools.length === 0) throw new Error('a worker needs at least one pool');
    this.concurrency = o.concurrency;
    this.requests = new RequestMux(o.nc);
    this.usage = new UsagePublisher(o.nc, this.requests, o.log, o.config.USAGE_LINGER_MS);
    this.ctx = {
      workerId: o.id,
      registry: o.registry ?? createRegistry(o.config),
      outbox: o.outbox,
      usage: this.usage,
      log: o.log,
      counters: this.counters,
      health: this.health,
      firstByteTimeoutMs: o.config.UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
      recordFirstToken: (ms) => {
        o.onFirstToken?.(ms);
        this.firstToken.record(ms);
      },
      onJobEnd: o.onJobEnd,
    };
    this.sweeper = this.startSweeper();
  }

  /** Where the runner resolves models (vendor batches resolve theirs there too). */
  get catalog(): ModelSource {
    return this.models;
  }

  /** A runner with its usage stream ensured, its catalog started and its adapters warmed up. */
  static async start(o: RunnerOptions): Promise<JobRunner> {
    await ensureUsageStream(o.nc);
    const runner = new JobRunner(o);
    if (o.catalog) runner.models = o.catalog;
    else {
      runner.ownDb = createPool(o.config.DATABASE_URL, 2);
      runner.ownCatalog = new Catalog(runner.ownDb);
      await runner.ownCatalog.start(o.nc);
      runner.models = runner.ownCatalog;
    }
    for (const adapter of runner.ctx.registry.all()) await adapter.warmup?.();
    return runner;
  }

  /** Whether this runner serves `pool`. */
  serves(pool: string): boolean {
    return this.pools.includes(pool);
  }

  get isDraining(): boolean {
    return this.draining;
  }

  get inFlight(): number {
    return this.inflight.size;
  }

  /**
   * The runner's own catalog entry for a job, or why the job cannot be served: the entry must
   * exist, belong to this pool and have the fingerprint the front door priced the job with. A
   * disagreement is looked up again once (the catalog may have just changed).
   */
  async resolve(job: Job, pool: string): Promise<CatalogEntry | string> {
    let model = await this.models.get(job.model.id);
    if (!model || model.fingerprint !== job.model.fingerprint) model = await this.models.fetch(job.model.id);
    if (!model) return `Model ${job.model.id} is not in this worker's catalog.`;
    if (model.pool !== pool) return `Model ${job.model.id} belongs to pool ${model.pool}, not ${pool}.`;
    if (model.fingerprint !== job.model.fingerprint) return `The job's catalog entry for ${job.model.id} differs from this worker's.`;
    // a batch line is priced at the batch prices (the primary deployment's), every other job at the online ones
    if (!samePrices(priceStrings(job.batch ? model.deployments[0].batchPrices : pricesOf(model)), job.model)) {
      return `The job's prices for ${job.model.id} differ from this worker's catalog.`;
    }
    return model;
  }

  /** A job that could not be read or resolved (counted; the caller answers it). */
  refused(): void {
    this.counters.invalid++;
  }

  /** Takes a job or says why not; `start` runs it (after the caller has sent the ack). */
  admit(job: Job, model: CatalogEntry, pool: string, acceptedAt: number, parent?: string): { ack: JobAck; start?: () => void } {
    if (this.draining) return { ack: { ok: false, code: 'draining', message: `Worker ${this.id} is shutting down.` } };
    if (this.inflight.size >= this.concurrency) {
      this.counters.busy++;
      this.lastRefusalAt = Date.now();
      return { ack: { ok: false, code: 'busy', message: `Worker ${this.id} is at its concurrency limit (${this.concurrency}).` } };
    }
    if (this.inflight.has(job.request_id)) {
      this.counters.invalid++;
      return { ack: { ok: false, code: 'invalid_job', message: `Request ${job.request_id} is already running here.` } };
    }
    this.counters.accepted++;
    return { ack: { ok: true, worker: this.id }, start: () => this.run(job, model, pool, acceptedAt, parent) };
  }

  /** Runs a job this process priced itself (in-process pools): the ack, and the job started when it is ok. */
  offer(job: Job, model: CatalogEntry, pool: string, traceparent?: string): JobAck {
    if (!this.serves(pool)) return { ok: false, code: 'invalid_job', message: `Worker ${this.id} does not serve pool ${pool}.` };
    const { ack, start } = this.admit(job, model, pool, Date.now(), traceparent);
    start?.();
    return ack;
  }

  /** Stops a job (the client left); it still bills what was generated. */
  cancel(requestId: string): void {
    const entry = this.inflight.get(requestId);
    if (entry) this.abort(entry, 'cancel');
  }

  private run(job: Job, model: CatalogEntry, pool: string, acceptedAt: number, parent?: string): void {
    const span = this.o.tracer.startSpan('job', {
      parent,
      kind: 'consumer',
      attributes: { 'catraca.request_id': job.request_id, 'catraca.pool': pool, 'catraca.model': job.model.id, 'catraca.worker': this.id },
    });
    const entry: Running = { ac: new AbortController(), pool, span, deadline: job.deadline, lastSent: acceptedAt };
    this.inflight.set(job.request_id, entry);
    entry.done = runJob(this.ctx, job, model, pool, acceptedAt, entry)
      .catch((e) => {
        span.setStatus('error', 'job crashed');
        this.o.log.error('job crashed', { request_id: job.request_id, err: e as Error });
      })
      .finally(() => {
        span.end();
        this.inflight.delete(job.request_id);
        this.o.onFree?.();
      });
  }

  private abort(entry: Running, why: AbortWhy): void {
    if (!entry.why) {
      entry.why = why;
      entry.ac.abort(new Error(why));
    }
  }

  // One timer for every stream (not one per stream): keepalives whenever a stream has been quiet
  // for keepaliveMs, before and after the first token (they are the worker's liveness signal for
  // the front door's idle timeout), and the job's deadline.
  private startSweeper(): NodeJS.Timeout {
    const keepaliveMs = this.o.keepaliveMs;
    const every = Math.max(10, Math.min(250, keepaliveMs > 0 ? Math.floor(keepaliveMs / 2) : 250));
    const timer = setInterval(() => {
      const now = Date.now();
      for (const entry of this.inflight.values()) {
        if (now >= entry.deadline) this.abort(entry, 'deadline');
        else if (keepaliveMs > 0 && entry.keepalive && now - entry.lastSent >= keepaliveMs) entry.keepalive();
      }
    }, every);
    timer.unref();
    return timer;
  }

  /** Refuses new jobs, lets the running ones finish (cutting them after drainTimeoutMs), flushes usage. */
  stop(): Promise<void> {
    this.stopping ??= this.drain();
    return this.stopping;
  }

  /** Stops taking jobs (the host drains its subscriptions next). */
  beginDrain(): void {
    if (this.draining) return;
    this.draining = true;
    this.o.log.info('worker draining', { worker: this.id, inFlight: this.inflight.size });
  }

  private async drain(): Promise<void> {
    this.beginDrain();
    const allDone = () => Promise.all([...this.inflight.values()].map((j) => j.done));
    if (this.inflight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([allDone(), new Promise((r) => (timer = setTimeout(r, this.o.drainTimeoutMs)))]);
      clearTimeout(timer);
      if (this.inflight.size > 0) {
        this.o.log.warn('drain timeout: cutting in-flight streams', { worker: this.id, inFlight: this.inflight.size });
        for (const j of this.inflight.values()) this.abort(j, 'drain');
        await allDone();
      }
    }
    await this.usage.flushed();
    this.o.outbox.flush(); // the last frames, before the connection drains
    this.requests.close();
    clearInterval(this.sweeper);
    this.ownCatalog?.stop();
    await this.ownDb?.end().catch(() => {});
  }

  stats(): WorkerStats {
    const byPool: Record<string, number> = Object.fromEntries(this.pools.map((p) => [p, 0]));
    for (const e of this.inflight.values()) byPool[e.pool] = (byPool[e.pool] ?? 0) + 1;
    return {
      id: this.id,
      pools: this.pools,
      draining: this.draining,
      concurrency: this.concurrency,
      inFlight: this.inflight.size,
      inFlightByPool: byPool,
      ...this.counters,
      usagePending: this.usage.size,
      usagePublishRetries: this.usage.retries,
      firstTokenMs: this.firstToken.summary(),
      deployments: this.health.snapshot(),
      upstreamKeys: Object.fromEntries(Object.entries(upstreamKeyEnv(this.o.config.WORKER_UPSTREAM_KEYS)).map(([k, v]) => [k, Boolean(v)])),
    };
  }
}
