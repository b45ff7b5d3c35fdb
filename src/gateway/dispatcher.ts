import os from 'node:os';
import type { Msg, NatsConnection, Subscription } from 'nats';
import { NO_RESPONDERS, RequestMux, TIMEOUT } from '../bus/requests.ts';
import { ACK_BY_HEADER, CapacitySchema, decodeJson, JobAckSchema } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { errors, type CatracaError } from '../errors.ts';

// Hands jobs to workers, and when every worker of a pool is at its limit, keeps them waiting in
// this front door (a bounded wait, not an instant 503):
//
//   - a job first goes to the pool's queue group (any worker); a worker at its limit answers busy
//     and the job is tried on others a couple of times;
//   - then it waits here, in arrival order per tenant, with tenants served round-robin: one
//     tenant's burst never delays another tenant's first request by more than one slot turnover;
//   - a worker that refused work announces free slots on catraca.capacity.<pool> as jobs end; the
//     front door then sends the next waiting jobs straight to that worker; a timer retries the
//     head of the queue too, in case an announcement was missed;
//   - a job waits at most `maxWaitMs` (then 503 overloaded with retry-after); past `maxQueued`
//     waiting jobs, or `maxPerTenant` for one tenant, a new one is refused at once (503); and so is
//     one whose payload would take the waiting jobs' bytes past `maxBytes`, or its tenant's past
//     `maxBytesPerTenant` (a waiting job holds its encoded payload, up to NATS max_payload each);
//   - a waiting job whose client leaves is removed at once: it never reaches a worker.
// The hold is taken before the job waits; the caller releases it when the job is refused.
//
// A job of a pool the front door serves in its own process (GATEWAY_LOCAL_POOLS) carries `local`:
// every attempt offers it to the door's lane first, and when the lane is full and no worker process
// answers either, the job waits like one for busy workers (the lane calls `localFree` as its jobs
// end) instead of being refused as unserved.
//
// Each attempt tells the worker until when the door waits for its ack (ACK_BY_HEADER); a worker
// that reads the job later (it was stalled) refuses it: the client was answered 504, so the job
// must not run. What became of a job whose ack did not come in time reaches `onLate`: a worker
// refused it (nothing will settle against its hold), took it all the same, or nothing was heard.

export interface DispatchOptions {
  maxWaitMs: number;
  maxQueued: number;
  maxPerTenant: number;
  /** bytes of encoded payload waiting, at most, in all / of one tenant (any pool) */
  maxBytes?: number;
  maxBytesPerTenant?: number;
  /** immediate attempts through the queue group before a job waits */
  attempts?: number;
  ackTimeoutMs?: number;
  /** how often the head of a non-empty queue is retried without an announcement */
  retryMs?: number;
  onWait?: (pool: string, ms: number) => void;
}

export interface Ticket {
  /** the worker that took the job; rejects with the CatracaError to answer */
  result: Promise<{ worker: string }>;
  /** the client left: a waiting job is dropped at once (result rejects with `cancelled`) */
  cancel(): void;
  readonly queued: boolean;
}

/** Offers the job to the door's own lane: the worker id when it took it, null when the lane is full or draining. */
export type LocalOffer = () => string | null;

/** What became of a job after the door stopped waiting for its ack (its request was answered 504). */
export type LateAnswer = { taken: true; worker: string } | { taken: false; refused: boolean };

interface Waiter {
  pool: string;
  tenant: string;
  payload: Uint8Array;
  local?: LocalOffer;
  /** NATS headers of the job message (its `traceparent`) */
  headers?: Record<string, string>;
  onLate?: (late: LateAnswer) => void;
  enqueuedAt: number;
  deadline: number;
  resolve: (r: { worker: string }) => void;
  reject: (e: CatracaError) => void;
  state: 'sending' | 'queued' | 'done';
  /** the client left while an attempt was on its way: the attempt's answer decides */
  cancelled?: boolean;
}

interface PoolQueue {
  /** waiting jobs per tenant, in arrival order */
  byTenant: Map<string, Waiter[]>;
  /** tenants with waiting jobs, in round-robin order */
  ring: string[];
  size: number;
  /** a pump is sending jobs for this pool */
  pumping: boolean;
}

type Attempt = { ok: true; worker: string } | { ok: false; refusal: 'busy' | 'fatal'; error?: CatracaError };

/**
 * The waiting jobs' byte budgets (DISPATCH_MAX_WAITING_BYTES, …_PER_TENANT): `auto` is an eighth of
 * the memory the process may use (its cgroup limit when it has one, else the machine's) for the
 * door, a quarter of that for one tenant.
 */
export function waitingByteBudgets(
  c: { DISPATCH_MAX_WAITING_BYTES: number | 'auto'; DISPATCH_MAX_WAITING_BYTES_PER_TENANT: number | 'auto' },
  memory = availableMemory(),
): { maxBytes: number; maxBytesPerTenant: number } {
  const maxBytes = c.DISPATCH_MAX_WAITING_BYTES === 'auto' ? Math.floor(memory / 8) : c.DISPATCH_MAX_WAITING_BYTES;
  const maxBytesPerTenant = c.DISPATCH_MAX_WAITING_BYTES_PER_TENANT === 'auto' ? Math.floor(maxBytes / 4) : c.DISPATCH_MAX_WAITING_BYTES_PER_TENANT;
  return { maxBytes, maxBytesPerTenant };
}

function availableMemory(): number {
  const limit = (process as { constrainedMemory?: () => number | undefined }).constrainedMemory?.() ?? 0;
  // no cgroup limit reads as 0, or as a huge number (2^63 - page)
  return limit > 0 && limit < os.totalmem() ? limit : os.totalmem();
}

export const CANCELLED = 'cancelled';
/** a pool whose worker took a job this recently is not "unserved" when none answers for a moment */
const RECENT_WORKER_MS = 30_000;

export class Dispatcher {
  private pools = new Map<string, PoolQueue>();
  /** when a worker of each pool last took a job from this door */
  private lastServed = new Map<string, number>();
  private sub?: Subscription;
  private timer?: NodeJS.Timeout;
  private waitingTotal = 0;
  private bytesTotal = 0;
  private readonly bytesByTenant = new Map<string, number>();
  readonly counts = { queued: 0, served_after_wait: 0, expired: 0, refused_full: 0, refused_bytes: 0, cancelled_waiting: 0 };

  private requests: RequestMux;

  constructor(
    private nc: NatsConnection,
    private opts: DispatchOptions,
  ) {
    this.requests = new RequestMux(nc);
  }

  start(): void {
    this.sub = this.nc.subscribe(subjects.capacityWildcard, {
      callback: (_err, msg) => {
        const pool = subjects.parseCapacity(msg.subject);
        let c: ReturnType<typeof CapacitySchema.parse>;
        try {
          c = CapacitySchema.parse(decodeJson(msg.data));
        } catch {
          return;
        }
        const q = this.pools.get(pool);
        if (q && q.size > 0) void this.pump(pool, q, c.worker, c.free);
      },
    });
    this.timer = setInterval(() => this.tick(), this.opts.retryMs ?? 250);
    this.timer.unref();
  }

  stop(): void {
    this.sub?.unsubscribe();
    this.requests.close();
    if (this.timer) clearInterval(this.timer);
    for (const [, q] of this.pools) for (const list of q.byTenant.values()) for (const w of list) this.finish(w, errors.shuttingDown());
    this.pools.clear();
  }

  /** Jobs waiting for a worker slot, per pool. */
  depth(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [pool, q] of this.pools) out[pool] = q.size;
    return out;
  }

  get waiting(): number {
    return this.waitingTotal;
  }

  /** Bytes of payload waiting, in all and for one tenant. */
  waitingBytes(tenant?: string): number {
    return tenant === undefined ? this.bytesTotal : (this.bytesByTenant.get(tenant) ?? 0);
  }

  private held(w: Waiter, sign: 1 | -1): void {
    const n = sign * w.payload.byteLength;
    this.bytesTotal += n;
    const t = (this.bytesByTenant.get(w.tenant) ?? 0) + n;
    if (t > 0) this.bytesByTenant.set(w.tenant, t);
    else this.bytesByTenant.delete(w.tenant);
  }

  /** Whether `w` may wait without taking the waiting bytes past a budget. */
  private fits(w: Waiter): boolean {
    const size = w.payload.byteLength;
    const { maxBytes = Number.POSITIVE_INFINITY, maxBytesPerTenant = Number.POSITIVE_INFINITY } = this.opts;
    return this.bytesTotal + size <= maxBytes && (this.bytesByTenant.get(w.tenant) ?? 0) + size <= maxBytesPerTenant;
  }

  submit(pool: string, tenant: string, payload: Uint8Array, headers?: Record<string, string>, local?: LocalOffer, onLate?: (late: LateAnswer) => void): Ticket {
    let resolve!: Waiter['resolve'];
    let reject!: Waiter['reject'];
    const result = new Promise<{ worker: string }>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const now = Date.now();
    const w: Waiter = {
      pool,
      tenant,
      payload,
      local,
      headers,
      onLate,
      enqueuedAt: now,
      deadline: now + this.opts.maxWaitMs,
      resolve,
      reject,
      state: 'sending',
    };
    const q = this.pools.get(pool);
    // Others are already waiting for this pool: join them rather than jump the queue.
    if (q && q.size > 0) this.enqueue(w);
    else void this.first(w);
    return {
      result,
      cancel: () => this.cancel(w),
      get queued() {
        return w.state === 'queued';
      },
    };
  }

  /** First attempts through the queue group, then the wait. */
  private async first(w: Waiter): Promise<void> {
    const attempts = this.opts.attempts ?? 3;
    for (let i = 0; i < attempts; i++) {
      const a = await this.attempt(subjects.job(w.pool), w);
      // a worker that took it is named even when the client left (the caller cancels the job there)
      if (a.ok) return this.finish(w, null, a.worker);
      if (a.refusal === 'fatal') return this.finish(w, a.error!);
      if (w.cancelled) return this.finish(w, errors.cancelled());
    }
    this.enqueue(w);
  }

  private enqueue(w: Waiter): void {
    let q = this.pools.get(w.pool);
    if (!q) this.pools.set(w.pool, (q = { byTenant: new Map(), ring: [], size: 0, pumping: false }));
    const list = q.byTenant.get(w.tenant);
    const full = this.waitingTotal >= this.opts.maxQueued || (list?.length ?? 0) >= this.opts.maxPerTenant;
    if (full || !this.fits(w)) {
      this.counts[full ? 'refused_full' : 'refused_bytes']++;
      return this.finish(w, errors.overloaded(Math.max(1, Math.ceil(this.opts.maxWaitMs / 4000))));
    }
    if (list) list.push(w);
    else {
      q.byTenant.set(w.tenant, [w]);
      q.ring.push(w.tenant);
    }
    q.size++;
    this.waitingTotal++;
    this.held(w, 1);
    this.counts.queued++;
    w.state = 'queued';
  }

  /** Removes `w` from its queue (it is being sent, was cancelled, or expired). */
  private unqueue(w: Waiter): void {
    const q = this.pools.get(w.pool);
    const list = q?.byTenant.get(w.tenant);
    if (!q || !list) return;
    const i = list.indexOf(w);
    if (i < 0) return;
    list.splice(i, 1);
    q.size--;
    this.waitingTotal--;
    this.held(w, -1);
    if (list.length === 0) {
      q.byTenant.delete(w.tenant);
      q.ring.splice(q.ring.indexOf(w.tenant), 1);
    }
  }

  /** The next waiting job in round-robin order across tenants (taken off its queue). */
  private next(q: PoolQueue): Waiter | undefined {
    const tenant = q.ring.shift();
    if (tenant === undefined) return undefined;
    const list = q.byTenant.get(tenant)!;
    const w = list.shift()!;
    q.size--;
    this.waitingTotal--;
    this.held(w, -1);
    if (list.length > 0) q.ring.push(tenant);
    else q.byTenant.delete(tenant);
    return w;
  }

  /** Puts a job back at the head of its tenant's queue and its tenant first in line. */
  private requeue(q: PoolQueue, w: Waiter): void {
    const list = q.byTenant.get(w.tenant);
    if (list) {
      list.unshift(w);
      q.ring.splice(q.ring.indexOf(w.tenant), 1);
    } else q.byTenant.set(w.tenant, [w]);
    q.ring.unshift(w.tenant);
    q.size++;
    this.waitingTotal++;
    this.held(w, 1);
    w.state = 'queued';
  }

  /** Sends waiting jobs, to `worker` when it announced free slots, else to the queue group; stops at the first refusal. */
  private async pump(pool: string, q: PoolQueue, worker: string | null, free: number): Promise<void> {
    if (q.pumping) return;
    q.pumping = true;
    try {
      for (let sent = 0; sent < free; sent++) {
        const w = this.next(q);
        if (!w) return;
        w.state = 'sending';
        const a = await this.attempt(worker ? subjects.jobDirect(pool, worker) : subjects.job(pool), w);
        if (!a.ok && w.cancelled) {
          this.finish(w, errors.cancelled());
          continue;
        }
        if (a.ok) {
          this.counts.served_after_wait++;
          this.opts.onWait?.(pool, Date.now() - w.enqueuedAt);
          this.finish(w, null, a.worker);
        } else if (a.refusal === 'fatal') this.finish(w, a.error!);
        else {
          this.requeue(q, w);
          return;
        }
      }
    } finally {
      q.pumping = false;
    }
  }

  /** The door's lane has free slots again: waiting jobs of these pools go. */
  localFree(pools: string[]): void {
    for (const pool of pools) {
      const q = this.pools.get(pool);
      if (q && q.size > 0) void this.pump(pool, q, null, Infinity);
    }
  }

  private async attempt(subject: string, w: Waiter): Promise<Attempt> {
    if (w.local) {
      const worker = w.local();
      if (worker) return { ok: true, worker };
    }
    let reply: Awaited<ReturnType<RequestMux['request']>>;
    const ackTimeoutMs = this.opts.ackTimeoutMs ?? 5000;
    const headers = { ...w.headers, [ACK_BY_HEADER]: String(Date.now() + ackTimeoutMs) };
    try {
      reply = await this.requests.request(subject, w.payload, ackTimeoutMs, headers, (msg) => this.late(w, msg));
    } catch (err) {
      // a worker addressed directly may have gone: the queue group or another announcement will do
      if (err === NO_RESPONDERS && subjects.parseJob(subject).worker) return { ok: false, refusal: 'busy' };
      // the door's own lane serves this pool: it frees a slot as one of its jobs ends
      if (err === NO_RESPONDERS && w.local) return { ok: false, refusal: 'busy' };
      if (err === NO_RESPONDERS) {
        // No worker listens now. If one took jobs of this pool lately (a restart, a reconnect, a
        // rolling deploy) the job waits for it like for a busy one; a pool nobody serves is 503 at once.
        const { pool } = subjects.parseJob(subject);
        if (Date.now() - (this.lastServed.get(pool) ?? 0) < RECENT_WORKER_MS) return { ok: false, refusal: 'busy' };
        return { ok: false, refusal: 'fatal', error: errors.noWorker(pool) };
      }
      // No answer in time: a worker that reads the job now refuses it (past its ack-by); `late` says what became of it.
      return { ok: false, refusal: 'fatal', error: err === TIMEOUT ? errors.timeout('No worker acknowledged the request in time.') : errors.internal() };
    }
    const ack = JobAckSchema.safeParse(decodeJson(reply.data));
    if (!ack.success) return { ok: false, refusal: 'fatal', error: errors.internal() };
    if (ack.data.ok) {
      this.lastServed.set(subjects.parseJob(subject).pool, Date.now());
      return { ok: true, worker: ack.data.worker };
    }
    if (ack.data.code === 'invalid_job') return { ok: false, refusal: 'fatal', error: errors.workerRefused(ack.data.message) };
    return { ok: false, refusal: 'busy' }; // busy, draining: another worker may take it
  }

  /** The answer to an attempt that timed out (the request was answered 504), or null when none came. */
  private late(w: Waiter, msg: Msg | null): void {
    if (!w.onLate) return;
    let ack: ReturnType<typeof JobAckSchema.safeParse> | null = null;
    try {
      ack = msg ? JobAckSchema.safeParse(decodeJson(msg.data)) : null;
    } catch {
      /* not JSON: nothing known */
    }
    if (ack?.success && ack.data.ok) w.onLate({ taken: true, worker: ack.data.worker });
    else w.onLate({ taken: false, refused: ack?.success === true });
  }

  private cancel(w: Waiter): void {
    if (w.state === 'sending') {
      w.cancelled = true; // the attempt on its way decides: taken (the caller cancels it there) or dropped
      return;
    }
    if (w.state !== 'queued') return;
    this.unqueue(w);
    this.counts.cancelled_waiting++;
    this.finish(w, errors.cancelled());
  }

  private finish(w: Waiter, err: CatracaError | null, worker?: string): void {
    if (w.state === 'done') return;
    w.state = 'done';
    if (err) w.reject(err);
    else w.resolve({ worker: worker! });
  }

  /** Expires jobs past their wait, and retries the head of each waiting pool. */
  private tick(): void {
    const now = Date.now();
    for (const [pool, q] of this.pools) {
      for (const list of [...q.byTenant.values()]) {
        while (list.length > 0 && list[0].deadline <= now) {
          const w = list[0];
          this.unqueue(w);
          this.counts.expired++;
          this.finish(w, errors.overloaded(Math.max(1, Math.ceil(this.opts.maxWaitMs / 4000))));
        }
      }
      if (q.size > 0) void this.pump(pool, q, null, Infinity);
    }
  }
}
