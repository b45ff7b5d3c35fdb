import type { NatsConnection, Subscription } from 'nats';
import { hashApiKey, looksLikeApiKey } from '../auth/keys.ts';
import { findKeyByHash, type ApiKeyRecord } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import { decodeJson, KeyInvalidatedSchema } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { errors } from '../errors.ts';

interface Entry {
  record: ApiKeyRecord | null; // null: no such key (negative cache)
  expires: number;
}

const NEGATIVE_TTL_MS = 2000;
const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * The key in an Authorization header, or the 401 to answer at once: a missing header, another
 * scheme, or a token that is not shaped like one of our keys never reaches the database (and is
 * refused before the request body is read).
 */
export function bearerKey(authorization: string): string {
  if (!authorization) throw errors.missingKey();
  const m = BEARER.exec(authorization);
  if (!m) throw errors.missingKey();
  if (!looksLikeApiKey(m[1])) throw errors.invalidKey();
  return m[1];
}

/**
 * Key records by SHA-256 of the presented key. Revocation arrives as a NATS broadcast and evicts
 * the entry at once; the TTL only bounds staleness of other changes (limits, allowlist). At most
 * `maxEntries` records are kept (oldest first out), so a flood of random well-formed keys costs
 * memory only up to that bound.
 */
export class KeyCache {
  private byHash = new Map<string, Entry>();
  private hashById = new Map<string, string>();
  private inflight = new Map<string, Promise<ApiKeyRecord | null>>();
  private sub?: Subscription;

  constructor(
    private db: Db,
    private ttlMs: number,
    private maxEntries = 100_000,
  ) {}

  get size(): number {
    return this.byHash.size;
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

  /** Resolves the Authorization header to a live key, or throws the right 401. */
  async authenticate(authorization: string): Promise<ApiKeyRecord> {
    const hash = hashApiKey(bearerKey(authorization)).toString('hex');
    const now = Date.now();
    let entry = this.byHash.get(hash);
    if (!entry || entry.expires < now) {
      const record = await this.load(hash);
      entry = { record, expires: now + (record ? this.ttlMs : NEGATIVE_TTL_MS) };
      this.byHash.delete(hash);
      while (this.byHash.size >= this.maxEntries) this.evictOldest();
      this.byHash.set(hash, entry);
      if (record) this.hashById.set(record.id, hash);
    }
    const record = entry.record;
    if (!record) throw errors.invalidKey();
    if (record.revoked_at) throw errors.revokedKey();
    if (record.expires_at && record.expires_at.getTime() <= now) throw errors.expiredKey();
    return record;
  }

  private evictOldest(): void {
    const oldest = this.byHash.keys().next();
    if (oldest.done) return;
    const record = this.byHash.get(oldest.value)?.record;
    this.byHash.delete(oldest.value);
    if (record && this.hashById.get(record.id) === oldest.value) this.hashById.delete(record.id);
  }

  private load(hash: string): Promise<ApiKeyRecord | null> {
    let p = this.inflight.get(hash);
    if (!p) {
      p = findKeyByHash(this.db, Buffer.from(hash, 'hex')).finally(() => this.inflight.delete(hash));
      this.inflight.set(hash, p);
    }
    return p;
  }

  close(): void {
    this.sub?.unsubscribe();
  }
}

function safeJson(data: Uint8Array): unknown {
  try {
    return decodeJson(data);
  } catch {
    return null;
  }
}
