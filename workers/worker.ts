import { createId } from '@paralleldrive/cuid2';
import type { JetStreamClient, Msg, NatsConnection, NatsError, Subscription } from 'nats';
import { connectBus, ensureUsageStream } from '../src/bus/connect.ts';
import { decodeJson, encode, type Job, JobSchema, type JobAck, type UsageMessage } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';
import { type Config, loadConfig } from '../src/config.ts';
import { createLogger, type Logger } from '../src/log.ts';
import { type AdapterRegistry, createRegistry } from './adapters/registry.ts';
import { isUpstreamError, type TokenUsage } from './adapters/types.ts';
import { sleep } from './adapters/util.ts';
import { createOutbox } from './outbox.ts';

// One worker process: queue-group subscriber of each of its pools, bounded concurrency, frames
// to the front door, exactly one usage message per accepted job to JetStream (msgID = request id).

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
  log?: Logger;
  /** Called when a job ends: ms from acceptance to its last frame, and its outcome (monitoring). */
  onJobEnd?: (ms: number, outcome: UsageMessage['outcome']) => void;
}

export interface LatencySummary {
  count: number;
  avg: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export interface WorkerStats {
  id: string;
  pools: string[];
  draining: boolean;
  concurrency: number;
  inFlight: number;
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
}

type AbortWhy = 'cancel' | 'deadline' | 'drain';

interface InFlight {
  abort(why: AbortWhy): void;
  done: Promise<void>;
}

const DRAIN_TIMEOUT_MS = 30_000;
const USAGE_PUBLISH_TIMEOUT_MS = 5_000;
const USAGE_RETRY_MAX_MS = 5_000;
const RING = 1024;
const MAX_TIMER_MS = 2 ** 31 - 1;

export function workerId(instance?: string): string {
  return instance ? instance.replace(/[^A-Za-z0-9_-]/g, '_') : `wrk_${createId()}`;
}

export async function startWorker(options: WorkerOptions): Promise<WorkerHandle> {
  const config = options.config ?? loadConfig();
  const log = options.log ?? createLogger('worker');
  const id = options.id ? workerId(options.id) : workerId(config.CATRACA_INSTANCE);
  const concurrency = options.concurrency ?? config.WORKER_CONCURRENCY;
  const keepaliveMs = options.keepaliveMs ?? config.KEEPALIVE_MS;
  const drainTimeoutMs = options.drainTimeoutMs ?? DRAIN_TIMEOUT_MS;
  const registry = options.registry ?? createRegistry(config);
  const pools = [...new Set(options.pools.map((p) => p.trim()).filter(Boolean))];
  if (pools.length === 0) throw new Error('a worker needs at least one pool');

  const ownConnection = !options.nc;
  const nc = options.nc ?? (await connectBus(options.natsUrl ?? config.NATS_URL, `worker ${id} [${pools.join(',')}]`));
  await ensureUsageStream(nc);
  const js: JetStreamClient = nc.jetstream();

  const inflight = new Map<string, InFlight>();
  const pendingUsage = new Set<Promise<void>>();
  const counters = { accepted: 0, completed: 0, failed: 0, cancelled: 0, busy: 0, invalid: 0, usagePublishRetries: 0 };
  const ring = new Float64Array(RING);
  let ringN = 0;
  let ftCount = 0;
  let ftSum = 0;
  let ftMax = 0;
  let draining = false;

  const recordFirstToken = (ms: number) => {
    ring[ringN++ % RING] = ms;
    ftCount++;
    ftSum += ms;
    if (ms > ftMax) ftMax = ms;
  };

  // ---- usage: at least once to JetStream, exactly once in effect (msgID dedupe) ----
  function publishUsage(pool: string, msg: UsageMessage): void {
    const data = encode(msg);
    const p = (async () => {
      let delay = 100;
      for (let attempt = 1; ; attempt++) {
        try {
          await js.publish(subjects.usage(pool), data, { msgID: msg.request_id, timeout: USAGE_PUBLISH_TIMEOUT_MS });
          return;
        } catch (err) {
          if (nc.isClosed()) {
            // Only reachable if someone closed the connection under us: leave the record in the log.
            log.error('usage publish impossible: NATS connection closed', { usage: msg, err: err as Error });
            return;
          }
          counters.usagePublishRetries++;
          log.warn('usage publish failed; retrying', { request_id: msg.request_id, attempt, err: err as Error });
          await sleep(delay);
          delay = Math.min(delay * 2, USAGE_RETRY_MAX_MS);
        }
      }
    })();
    pendingUsage.add(p);
    void p.finally(() => pendingUsage.delete(p));
  }

  // The front door may be gone when a frame is published; the job still finishes and is billed.
  const outbox = createOutbox(nc, (err, subject) => log.debug('frame publish failed', { subject, err: err as Error }));

  // ---- one job ----
  async function run(job: Job, pool: string, acceptedAt: number, entry: { why?: AbortWhy; ac: AbortController }): Promise<void> {
    const adapter = registry.forPool(pool);
    let seq = 0;
    let lastSent = Date.now();
    const send = (frame: Record<string, unknown>) => {
      frame.seq = seq++;
      lastSent = Date.now();
      outbox.publish(job.reply_to, encode(frame));
    };

    // Keepalives whenever the stream has been quiet for keepaliveMs, before and after the first
    // token: they are the worker's liveness signal for the front door's idle timeout.
    const keepalive: NodeJS.Timeout | undefined =
      keepaliveMs > 0
        ? setInterval(() => {
            if (Date.now() - lastSent >= keepaliveMs) send({ t: 'keepalive' });
          }, Math.max(10, Math.floor(keepaliveMs / 2)))
        : undefined;
    const deadline = setTimeout(() => {
      if (!entry.why) {
        entry.why = 'deadline';
        entry.ac.abort(new Error('deadline'));
      }
    }, Math.min(MAX_TIMER_MS, Math.max(0, job.deadline - Date.now())));

    let output = '';
    let deltas = 0;
    let usage: TokenUsage | undefined;
    let estimated = false;
    let finish: string | undefined;
    let failure: unknown;
    try {
      for await (const ev of adapter.stream(job, entry.ac.signal)) {
        if (entry.why) break;
        if (ev.type === 'delta') {
          if (deltas++ === 0) recordFirstToken(Date.now() - acceptedAt);
          output += ev.content;
          send({ t: 'delta', content: ev.content });
        } else if (ev.type === 'reasoning') {
          if (deltas++ === 0) recordFirstToken(Date.now() - acceptedAt);
          output += ev.content;
          send({ t: 'delta', content: '', reasoning: ev.content });
        } else if (ev.type === 'tool_calls') {
          if (deltas++ === 0) recordFirstToken(Date.now() - acceptedAt);
          // generated output too: counted in the estimate when the upstream gives no usage
          for (const c of ev.tool_calls) output += (c.function?.name ?? '') + (c.function?.arguments ?? '');
          send({ t: 'delta', content: '', tool_calls: ev.tool_calls });
        } else if (ev.type === 'usage') {
          usage = { prompt_tokens: ev.prompt_tokens, completion_tokens: ev.completion_tokens };
          estimated = ev.estimated ?? false;
        } else {
          finish = ev.reason;
        }
      }
    } catch (err) {
      failure = err;
    } finally {
      clearInterval(keepalive);
      clearTimeout(deadline);
    }

    const why = entry.why;
    const ok = !why && failure === undefined;
    // Billing rule: the upstream's usage when it gave one; otherwise the adapter's count of what
    // was generated. A request that failed or was cut before its first token costs nothing.
    if (!usage) {
      if (ok || deltas > 0) {
        try {
          const counted = await adapter.countUsage(job, output);
          usage = counted.usage;
          estimated = counted.estimated;
        } catch (err) {
          log.error('token count failed', { request_id: job.request_id, err: err as Error });
          usage = { prompt_tokens: 0, completion_tokens: deltas };
          estimated = true;
        }
      } else {
        usage = { prompt_tokens: 0, completion_tokens: 0 };
      }
    }

    let outcome: UsageMessage['outcome'];
    if (ok) {
      outcome = 'completed';
      counters.completed++;
      send({ t: 'done', finish_reason: finish ?? 'stop', usage, estimated });
    } else if (why === 'cancel') {
      outcome = 'cancelled';
      counters.cancelled++;
      send({ t: 'error', status: 499, code: 'request_cancelled', message: 'The request was cancelled by the client.', usage });
    } else {
      outcome = 'error';
      counters.failed++;
      if (why === 'deadline') {
        send({ t: 'error', status: 504, code: 'upstream_timeout', message: 'The request did not finish before its deadline.', usage });
      } else if (why === 'drain') {
        send({ t: 'error', status: 503, code: 'worker_shutting_down', message: 'The worker serving this request shut down; retry.', usage });
      } else if (isUpstreamError(failure)) {
        const frame: Record<string, unknown> = { t: 'error', status: failure.status, code: failure.code, message: failure.message, usage };
        if (failure.retryAfter !== undefined) frame.retry_after = failure.retryAfter;
        send(frame);
        log.info('upstream error', { request_id: job.request_id, pool, status: failure.status, code: failure.code, tokens: deltas });
      } else {
        log.error('job failed unexpectedly', { request_id: job.request_id, pool, err: failure as Error });
        send({ t: 'error', status: 502, code: 'upstream_error', message: 'The upstream call failed unexpectedly.', usage });
      }
    }

    options.onJobEnd?.(Date.now() - acceptedAt, outcome);
    publishUsage(pool, {
      v: 1,
      request_id: job.request_id,
      tenant_id: job.tenant_id,
      key_id: job.key_id,
      model: job.model.id,
      pool,
      input_price: job.model.input_price,
      output_price: job.model.output_price,
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      estimated,
      outcome,
      ended_at: Date.now(),
      worker: id,
    });
  }

  // ---- subscriptions ----
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
      counters.invalid++;
      return respond(msg, { ok: false, code: 'invalid_job', message: 'The job does not match the Job schema.' });
    }
    if (draining) return respond(msg, { ok: false, code: 'draining', message: `Worker ${id} is shutting down.` });
    if (inflight.size >= concurrency) {
      counters.busy++;
      return respond(msg, { ok: false, code: 'busy', message: `Worker ${id} is at its concurrency limit (${concurrency}).` });
    }
    if (inflight.has(job.request_id)) {
      counters.invalid++;
      return respond(msg, { ok: false, code: 'invalid_job', message: `Request ${job.request_id} is already running here.` });
    }
    counters.accepted++;
    // Ack first: frames published after it on the same connection arrive after it.
    respond(msg, { ok: true, worker: id });
    const entry: { why?: AbortWhy; ac: AbortController } = { ac: new AbortController() };
    const done = run(job, pool, acceptedAt, entry)
      .catch((e) => log.error('job crashed', { request_id: job.request_id, err: e as Error }))
      .finally(() => inflight.delete(job.request_id));
    inflight.set(job.request_id, {
      abort(why) {
        if (!entry.why) {
          entry.why = why;
          entry.ac.abort(new Error(why));
        }
      },
      done,
    });
  };

  for (const adapter of new Set(pools.map((p) => registry.forPool(p)))) await adapter.warmup?.();

  const jobSubs: Subscription[] = pools.map((pool) =>
    nc.subscribe(subjects.job(pool), { queue: subjects.queueGroup(pool), callback: onJob(pool) }),
  );
  const cancelPrefix = subjects.cancel(id, '');
  const cancelSub = nc.subscribe(subjects.cancelWildcard(id), {
    callback: (err, msg) => {
      if (err) return;
      inflight.get(msg.subject.slice(cancelPrefix.length))?.abort('cancel');
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
          for (const j of inflight.values()) j.abort('drain');
          await allDone();
        }
      }
      while (pendingUsage.size > 0) await Promise.all([...pendingUsage]);
      outbox.flush(); // the last frames, before the connection drains
      await cancelSub.drain().catch(() => {});
      if (ownConnection) await nc.drain().catch(() => {});
      log.info('worker stopped', { worker: id });
    })());

  const stats = (): WorkerStats => {
    const n = Math.min(ringN, RING);
    const sorted = Array.from(ring.subarray(0, n)).sort((a, b) => a - b);
    const q = (p: number) => (n === 0 ? 0 : sorted[Math.min(n - 1, Math.floor(p * n))]);
    return {
      id,
      pools,
      draining,
      concurrency,
      inFlight: inflight.size,
      ...counters,
      usagePending: pendingUsage.size,
      firstTokenMs: { count: ftCount, avg: ftCount ? ftSum / ftCount : 0, p50: q(0.5), p95: q(0.95), p99: q(0.99), max: ftMax },
    };
  };

  return { id, nc, stop, stats };
}
