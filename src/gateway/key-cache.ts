import type { NatsConnection, Subscription } from 'nats';
import { hashApiKey, looksLikeApiKey } from '../auth/keys.ts';
import { findKeyByHash, type ApiKeyRecord } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import { decodeJson, KeyInvalidatedSchema } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { type CatracaError, errors } from '../errors.ts';
import { AddressLimiter } from './address-limiter.ts';

interface Entry {
  record: ApiKeyRecord;
  expires: number;
}

const BEARER = /^Bearer\s+(\S+)\s*$/i;

// The refusals a flood of junk keys gets, made once (an Error captures a stack trace each time it is
// made, a measurable share of what a junk request costs); errors are never changed once made.
const INVALID_KEY = errors.invalidKey();
const LOOKUP_BUSY = errors.keyLookupBusy();
const limitedBy = new Map<number, CatracaError>();
const unknownKeysLimited = (retryAfterS: number) => {
  let e = limitedBy.get(retryAfterS);
  if (!e) limitedBy.set(retryAfterS, (e = errors.unknownKeysLimited(retryAfterS)));
  return e;
};

/**
 * The key in an Authorization header, or the 401 to answer at once: a missing header, another
 * scheme, or a token that is not shaped like one of our keys never reaches the database (and is
 * refused before the request body is read).
 */
export function bearerKey(authorization: string): string {
  if (!authorization) throw errors.missingKey();
  const m = BEARER.exec(authorization);
  if (!m) throw errors.missingKey();
  if (!looksLikeApiKey(m[1])) throw INVALID_KEY;
  return m[1];
}

/**
 * The key a request presents: `Authorization: Bearer <key>`, or (routes of Anthropic's API) the
 * `x-api-key` header. Checked as bearerKey checks it.
 */
export function presentedKey(authorization: string, xApiKey?: string): string {
  if (!authorization && xApiKey) {
    if (!looksLikeApiKey(xApiKey.trim())) throw INVALID_KEY;
    return xApiKey.trim();
  }
  return bearerKey(authorization);
}

export interface KeyCacheOptions {
  /** how long a real key's record is used before it is read again (revocations are pushed at once) */
  ttlMs: number;
  /** real keys' records kept, at most (oldest first out) */
  maxEntries?: number;
  /** unknown keys remembered, apart from the real ones (a flood of them never evicts a real key) */
  maxNegative?: number;
  negativeTtlMs?: number;
  /** PostgreSQL lookups at once (KEY_LOOKUP_CONCURRENCY; the front door gives them a pool of that size) */
  concurrency?: number;
  /** lookups of unknown keys that may wait for a free one; more are refused at once (503) */
  maxWaiting?: number;
  /** how long a lookup waits for its turn before it is refused (503) */
  maxWaitMs?: number;
  /** lookups of keys not known here, per client address and minute (also the burst); 0 = no limit */
  unknownPerMinute?: number;
  /** client addresses tracked by that limit at once */
  maxAddresses?: number;
}

/** Who is asking: the client's address key (src/gateway/client-address.ts), computed only when needed. */
export type ClientOf = () => string;

interface Waiter {
  resolve: (release: () => void) => void;
  reject: (err: CatracaError) => void;
  timer: NodeJS.Timeout;
}

/**
 * Key records by SHA-256 of the presented key. Revocation arrives as a NATS broadcast and evicts
 * the entry at once; the TTL only bounds staleness of other changes (limits, allowlist).
 *
 * What a flood of random well-shaped keys costs (none of them exists): each is one PostgreSQL
 * lookup, so
 *   - unknown keys are remembered in a small cache of their own: they never evict a real key;
 *   - lookups of keys never found here are rate-limited per client address before the database
 *     (a token bucket; a lookup that finds a key gives its token back): 429 past the limit; a
 *     request for a key whose lookup is already running waits for it without a token of its own;
 *   - at most `concurrency` lookups run at once (on a pool of their own in the front door, never
 *     admission's); keys known here (a record to refresh) go first, unknown ones wait in a bounded
 *     queue for at most `maxWaitMs`, then 503 `key_lookup_busy` with retry-after.
 */
export class KeyCache {
  private byHash = new Map<string, Entry>();
  private hashById = new Map<string, string>();
  /** unknown keys: hash → expiry */
  private negative = new Map<string, number>();
  private inflight = new Map<string, Promise<ApiKeyRecord | null>>();
  private sub?: Subscription;
  private readonly o: Required<KeyCacheOptions>;
  private readonly limiter: AddressLimiter | null;
  private active = 0;
  private readonly waitingKnown: Waiter[] = [];
  private readonly waitingUnknown: Waiter[] = [];
  /** PostgreSQL lookups by result, and requests refused before any lookup */
  readonly counts = { found: 0, not_found: 0, error: 0, negative_hit: 0, rate_limited: 0, busy: 0 };

  constructor(
    private db: Db,
    options: KeyCacheOptions,
  ) {
    this.o = {
      maxEntries: 100_000,
      maxNegative: 10_000,
      negativeTtlMs: 30_000,
      concurrency: 4,
      maxWaiting: 256,
      maxWaitMs: 1000,
      unknownPerMinute: 0,
      maxAddresses: 100_000,
      ...options,
    };
    this.limiter = this.o.unknownPerMinute > 0 ? new AddressLimiter(this.o.unknownPerMinute, this.o.maxAddresses) : null;
  }

  /** Real keys' records cached. */
  get size(): number {
    return this.byHash.size;
  }

  /** Unknown keys remembered. */
  get negativeSize(): number {
    return this.negative.size;
  }

  /** Lookups running, and waiting for their turn. */
  get lookups(): { active: number; waiting: number } {
    return { active: this.active, waiting: this.waitingKnown.length + this.waitingUnknown.length };
  }

  listen(nc: NatsConnection): void {
    this.sub = nc.subscribe(subjects.keyInvalidated, {
      callback: (_err, msg) => {
        const parsed = KeyInvalidatedSchema.safeParse(safeJson(msg.data));
        if (parsed.success) this.invalidate(parsed.data.key_id);
      },
    });
  }

  private listeners: Array<(keyId: string) => void> = [];

  /** Called with the key id whenever a key is invalidated (revoked or changed). */
  onInvalidate(fn: (keyId: string) => void): void {
    this.listeners.push(fn);
  }

  invalidate(keyId: string): void {
    for (const fn of this.listeners) fn(keyId);
    const hash = this.hashById.get(keyId);
    if (hash) this.byHash.delete(hash);
    this.hashById.delete(keyId);
  }

  /** Resolves the Authorization header to a live key, or rejects with the right 401 (429, 503). */
  async authenticate(authorization: string, client?: ClientOf): Promise<ApiKeyRecord> {
    return this.resolve(bearerKey(authorization), client);
  }

  /** Resolves a presented key (see presentedKey) to a live key, or rejects with the right 401 (429, 503). */
  async authenticateKey(key: string, client?: ClientOf): Promise<ApiKeyRecord> {
    return this.resolve(key, client);
  }

  /**
   * The key's record when it is cached, a promise of it when PostgreSQL must be asked; throws the
   * refusal at once when it is known without the database (an unknown key remembered, a revoked or
   * expired key, the client address over its limit). `client` is called synchronously, at most once.
   */
  resolve(key: string, client?: ClientOf): ApiKeyRecord | Promise<ApiKeyRecord> {
    const hash = hashApiKey(key).toString('hex');
    const now = Date.now();
    const entry = this.byHash.get(hash);
    if (entry && entry.expires >= now) return live(entry.record, now);
    if (!entry) {
      const until = this.negative.get(hash);
      if (until !== undefined && until >= now) {
        this.counts.negative_hit++;
        throw INVALID_KEY;
      }
    }
    // A key known here (its record expired) is refreshed without costing its client a token, and so
    // is a key whose lookup is already running: the limit counts lookups, and a request that waits
    // for one costs PostgreSQL nothing (many connections opening at once with a key just made —
    // a batch job behind one NAT — all wait for the first one's lookup, and are all served).
    const address = !entry && this.limiter && !this.inflight.has(hash) ? (client?.() ?? '') : null;
    if (address !== null) {
      const retryAfterS = this.limiter!.take(address, now);
      if (retryAfterS > 0) {
        this.counts.rate_limited++;
        throw unknownKeysLimited(retryAfterS);
      }
    }
    return this.load(hash, entry !== undefined).then((record) => {
      const at = Date.now();
      if (!record) {
        this.remember(hash, at);
        throw INVALID_KEY;
      }
      if (address !== null) this.limiter!.refund(address);
      this.store(hash, record, at);
      return live(record, at);
    });
  }

  private store(hash: string, record: ApiKeyRecord, now: number): void {
    this.negative.delete(hash);
    this.byHash.delete(hash);
    while (this.byHash.size >= this.o.maxEntries) this.evictOldest();
    this.byHash.set(hash, { record, expires: now + this.o.ttlMs });
    this.hashById.set(record.id, hash);
  }

  private remember(hash: string, now: number): void {
    this.negative.delete(hash);
    while (this.negative.size >= this.o.maxNegative) this.negative.delete(this.negative.keys().next().value!);
    this.negative.set(hash, now + this.o.negativeTtlMs);
  }

  private evictOldest(): void {
    const oldest = this.byHash.keys().next();
    if (oldest.done) return;
    const record = this.byHash.get(oldest.value)?.record;
    this.byHash.delete(oldest.value);
    if (record && this.hashById.get(record.id) === oldest.value) this.hashById.delete(record.id);
  }

  private load(hash: string, known: boolean): Promise<ApiKeyRecord | null> {
    let p = this.inflight.get(hash);
    if (!p) {
      p = this.turn(known)
        .then((release) =>
          findKeyByHash(this.db, Buffer.from(hash, 'hex'))
            .then(
              (record) => (this.counts[record ? 'found' : 'not_found']++, record),
              (err) => {
                this.counts.error++;
                throw err;
              },
            )
            .finally(release),
        )
        .finally(() => this.inflight.delete(hash));
      this.inflight.set(hash, p);
    }
    return p;
  }

  /** Waits for a lookup slot; resolves with the function that frees it. */
  private turn(known: boolean): Promise<() => void> {
    if (this.active < this.o.concurrency) {
      this.active++;
      return Promise.resolve(this.release);
    }
    const queue = known ? this.waitingKnown : this.waitingUnknown;
    if (!known && queue.length >= this.o.maxWaiting) {
      this.counts.busy++;
      return Promise.reject(LOOKUP_BUSY);
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          queue.splice(queue.indexOf(w), 1);
          this.counts.busy++;
          reject(LOOKUP_BUSY);
        }, this.o.maxWaitMs),
      };
      queue.push(w);
    });
  }

  private readonly release = (): void => {
    const next = this.waitingKnown.shift() ?? this.waitingUnknown.shift();
    if (!next) {
      this.active--;
      return;
    }
    clearTimeout(next.timer);
    next.resolve(this.release);
  };

  close(): void {
    this.sub?.unsubscribe();
  }
}

/** The record, unless the key can no longer be used (the right 401). */
function live(record: ApiKeyRecord, now: number): ApiKeyRecord {
  if (record.revoked_at) throw errors.revokedKey();
  if (record.expires_at && record.expires_at.getTime() <= now) throw errors.expiredKey();
  return record;
}

function safeJson(data: Uint8Array): unknown {
  try {
    return decodeJson(data);
  } catch {
    return null;
  }
}
