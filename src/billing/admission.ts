import { randomBytes } from 'node:crypto';
import type { DbClient } from '../db/pool.ts';
import type { AdmissionBatcher } from './admission-batcher.ts';
import { admitLimited, closeLease, openLease, releaseHold, type AdmitRequest, type AdmitResult } from './ledger.ts';

// Admission in a front door. A request is admitted against one of two kinds of hold:
//
//   its own hold     one row-locked PostgreSQL call per request (catraca_admit, batched per tenant
//                    by AdmissionBatcher): exact to the micro-real, also near exhaustion;
//   the door's lease a slice of the tenant's (and key's) balance reserved in one PostgreSQL call
//                    for `windowMs` (catraca_lease_open); requests are admitted from it in memory.
//
// A lease is only granted while the tenant and key are rich relative to it (available ≥ lease ×
// richness), and keys with a request rate limit are never leased, so near exhaustion, and for
// rate-limited keys, every request takes the exact path. Settlement draws each request's cost
// from the lease it was admitted under (the job and the usage message name it).
//
// What the door knows about a lease: granted G, the worst cases W it admitted under it, and for
// each request that ended, its exact cost C (from the worker's terminal frame, the same usage the
// worker publishes). remaining = G − ΣW + Σ(W − C). A request whose end the door never sees keeps
// its W counted. When the window ends (or the key changes, or the door drains) the lease is closed:
// PostgreSQL keeps covering at most ΣW − Σ(W − C) in debits and returns the rest to the balance at
// once; once every request admitted under it has ended, a second close makes that exact.
//
// Failure modes: a door that dies holding a lease leaves it reserved until it expires
// (windowMs + REQUEST_TIMEOUT_MS + HOLD_GRACE_MS) and the sweeper releases it; the requests it
// admitted still settle against it. Nothing is ever admitted beyond what PostgreSQL reserved.

export interface AdmitInput extends AdmitRequest {
  /** false for keys with a request rate limit (counted in PostgreSQL per request) */
  leasable: boolean;
  /** for keys with finer limits (concurrency, tokens per minute, per-end-user cap): what they count */
  limited?: { tokens: number; endUser: string | null };
}

export interface Admitted extends AdmitResult {
  /** the hold id to settle against: the request id, or the lease id */
  hold: string;
}

interface Lease {
  id: string;
  tenantId: string;
  keyId: string;
  granted: bigint;
  admitted: bigint;
  refunded: bigint;
  admitUntil: number;
  /** requests admitted under it whose end the door has not seen */
  open: number;
  retired: boolean;
}

interface KeyState {
  lease?: Lease;
  /** requests of the key since `countFrom` (one lease window): a lease pays off only for a busy key */
  seen: number;
  countFrom: number;
  opening?: Promise<void>;
  /** the last lease call said 'per_request': no new lease before this time */
  noLeaseUntil: number;
}

export interface AdmissionOptions {
  doorId: string;
  /** how long a lease admits requests; 0 turns leases off */
  windowMs: number;
  /** a lease is granted only while available ≥ lease × richness */
  richness: number;
  /** ms a hold lives after its window (REQUEST_TIMEOUT_MS + HOLD_GRACE_MS) */
  holdTtlMs: number;
  /** a lease covers at least this many worst cases of the request that opens it */
  minRequests?: number;
  /** a key gets a lease once it sends this many requests within one window (1: from its first) */
  leaseAfter?: number;
  onError?: (what: string, err: unknown) => void;
}

const remaining = (l: Lease) => l.granted - l.admitted + l.refunded;

export class Admission {
  private keys = new Map<string, KeyState>();
  private requests = new Map<string, { lease: Lease; w: bigint }>();
  private closing = new Set<Promise<unknown>>();
  /** closed leases whose requests have not all ended: closed again, exactly, when they have */
  private retiredOpen = new Set<Lease>();
  /** closes that failed (PostgreSQL unreachable): retried on every tick until they succeed */
  private failedCloses = new Set<Lease>();
  private timer?: NodeJS.Timeout;
  private seq = 0;
  private readonly prefix: string;
  readonly counts = { leased: 0, perRequest: 0, leasesOpened: 0, leasesClosed: 0 };

  constructor(
    private db: DbClient,
    private batcher: AdmissionBatcher,
    private opts: AdmissionOptions,
  ) {
    this.prefix = `lease_${opts.doorId}_${randomBytes(4).toString('hex')}_`;
    if (opts.windowMs > 0) {
      this.timer = setInterval(() => this.retireExpired(), Math.max(100, opts.windowMs));
      this.timer.unref();
    }
  }

  /** Leases open now (for stats). */
  get leases(): number {
    let n = 0;
    for (const s of this.keys.values()) if (s.lease && !s.lease.retired) n++;
    return n;
  }

  async admit(input: AdmitInput): Promise<Admitted> {
    if (this.opts.windowMs > 0 && input.leasable && this.busy(input.keyId)) {
      for (;;) {
        const state = this.keys.get(input.keyId) ?? this.newState(input.keyId);
        if (state.noLeaseUntil > Date.now()) break;
        const lease = state.lease;
        if (lease && !lease.retired && lease.tenantId === input.tenantId && Date.now() < lease.admitUntil && remaining(lease) >= input.max) {
          lease.admitted += input.max;
          lease.open++;
          this.requests.set(input.requestId, { lease, w: input.max });
          this.counts.leased++;
          return { status: 'ok', held: input.max, available: remaining(lease), rl_limit: null, rl_remaining: null, rl_reset_ms: null, hold: lease.id };
        }
        if (state.opening) {
          await state.opening;
          continue;
        }
        const revoked = await this.open(state, input);
        if (revoked) return { status: 'key_revoked', held: 0n, available: 0n, rl_limit: null, rl_remaining: null, rl_reset_ms: null, hold: input.requestId };
      }
    }
    this.counts.perRequest++;
    if (input.limited) {
      const { limited, leasable: _l, ...request } = input;
      return { ...(await admitLimited(this.db, { ...request, ...limited })), hold: input.requestId };
    }
    return { ...(await this.batcher.admit(input)), hold: input.requestId };
  }

  /**
   * The request ended. `cost` is what it will be debited (from its terminal frame), or null when
   * the door cannot know (its worker vanished): then its worst case stays counted.
   */
  finish(requestId: string, cost: bigint | null): void {
    const r = this.requests.get(requestId);
    if (!r) return;
    this.requests.delete(requestId);
    const { lease, w } = r;
    lease.open--;
    if (cost !== null) lease.refunded += w - cost;
    if (lease.retired && lease.open === 0 && this.retiredOpen.delete(lease)) this.sendClose(lease);
  }

  /** The request never reached a worker: nothing will settle against its hold. */
  async release(requestId: string): Promise<void> {
    if (this.requests.has(requestId)) return this.finish(requestId, 0n);
    await releaseHold(this.db, requestId);
  }

  /** The key was revoked or changed: stop admitting under its lease (a new one re-checks it). */
  invalidateKey(keyId: string): void {
    const state = this.keys.get(keyId);
    if (!state) return;
    this.keys.delete(keyId);
    if (state.lease) this.retire(state.lease);
  }

  /** The tenant was suspended (or changed): stop admitting any of its keys under a lease. */
  invalidateTenant(tenantId: string): void {
    for (const [keyId, state] of this.keys) {
      if (state.lease?.tenantId !== tenantId) continue;
      this.keys.delete(keyId);
      this.retire(state.lease);
    }
  }

  /** Drain: close every lease (what their admitted requests may still cost stays covered). */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (const s of this.keys.values()) if (s.lease) this.retire(s.lease);
    this.keys.clear();
    // what the door learned since it closed these: close them again with it
    for (const lease of this.retiredOpen) this.sendClose(lease);
    this.retiredOpen.clear();
    while (this.closing.size > 0) await Promise.allSettled([...this.closing]);
  }

  private newState(keyId: string): KeyState {
    const s: KeyState = { noLeaseUntil: 0, seen: 0, countFrom: Date.now() };
    this.keys.set(keyId, s);
    return s;
  }

  /**
   * Counts this request of the key; true when its requests go through a lease: it has a live one,
   * or it sent `leaseAfter` within the current window. A lease costs an open and a close (two
   * PostgreSQL calls, each about one hold's), so for a key slower than that (e.g. a thousand
   * tenants at a request every two seconds each) a hold per request is cheaper.
   */
  private busy(keyId: string): boolean {
    const state = this.keys.get(keyId) ?? this.newState(keyId);
    const now = Date.now();
    if (now - state.countFrom >= this.opts.windowMs) {
      state.countFrom = now;
      state.seen = 0;
    }
    state.seen++;
    if (state.lease && !state.lease.retired && now < state.lease.admitUntil) return true;
    return state.seen >= (this.opts.leaseAfter ?? 1);
  }

  /** Opens a lease for the key; true when the key turned out to be revoked. */
  private async open(state: KeyState, input: AdmitInput): Promise<boolean> {
    const previous = state.lease;
    // Size: enough for what the key admitted in the previous window, twice over, and at least
    // `minRequests` of this request's worst case.
    const want = [input.max * BigInt(this.opts.minRequests ?? 16), previous ? previous.admitted * 2n : 0n].reduce((a, b) => (a > b ? a : b));
    const id = `${this.prefix}${(this.seq++).toString(36)}`;
    let revoked = false;
    state.opening = (async () => {
      try {
        const r = await openLease(this.db, {
          leaseId: id,
          tenantId: input.tenantId,
          keyId: input.keyId,
          amount: want,
          richness: this.opts.richness,
          ttlMs: this.opts.windowMs + this.opts.holdTtlMs,
        });
        if (previous) this.retire(previous);
        if (r.status === 'ok') {
          state.lease = {
            id,
            tenantId: input.tenantId,
            keyId: input.keyId,
            granted: r.held,
            admitted: 0n,
            refunded: 0n,
            admitUntil: Date.now() + this.opts.windowMs,
            open: 0,
            retired: false,
          };
          this.counts.leasesOpened++;
        } else {
          state.lease = undefined;
          state.noLeaseUntil = Date.now() + this.opts.windowMs;
          revoked = r.status === 'key_revoked';
        }
      } catch (err) {
        // PostgreSQL unreachable: the exact path answers (and fails) the same way
        this.opts.onError?.('lease open failed', err);
        state.noLeaseUntil = Date.now() + Math.min(1000, this.opts.windowMs);
      } finally {
        state.opening = undefined;
      }
    })();
    await state.opening;
    return revoked;
  }

  private retire(lease: Lease): void {
    if (lease.retired) return;
    lease.retired = true;
    if (lease.open > 0) this.retiredOpen.add(lease);
    this.sendClose(lease);
  }

  /** Tells PostgreSQL the most the lease's requests can still cost in all; the rest is released. */
  private sendClose(lease: Lease): void {
    const maxTotal = lease.admitted - lease.refunded;
    const p = closeLease(this.db, lease.id, maxTotal)
      .then(() => {
        this.failedCloses.delete(lease);
        if (lease.open === 0) this.counts.leasesClosed++;
      })
      .catch((err) => {
        // retried on the next tick; if this door dies first, the lease expires on its own
        if (!this.failedCloses.has(lease)) this.opts.onError?.('lease close failed; retrying', err);
        this.failedCloses.add(lease);
      })
      .finally(() => this.closing.delete(p));
    this.closing.add(p);
  }

  private retireExpired(): void {
    const now = Date.now();
    for (const lease of this.failedCloses) this.sendClose(lease);
    for (const [keyId, s] of this.keys) {
      if (s.lease && !s.lease.retired && now >= s.lease.admitUntil && !s.opening) {
        this.retire(s.lease);
        s.lease = undefined;
      }
      if (!s.lease && !s.opening && s.noLeaseUntil <= now && now - s.countFrom >= this.opts.windowMs) this.keys.delete(keyId);
    }
  }
}
