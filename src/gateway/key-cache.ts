import type { NatsConnection, Subscription } from 'nats';
import { hashApiKey } from '../auth/keys.ts';
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

/**
 * Key records by SHA-256 of the presented key. Revocation arrives as a NATS broadcast and evicts
 * the entry at once; the TTL only bounds staleness of other changes (limits, allowlist).
 */
export class KeyCache {
  private byHash = new Map<string, Entry>();
  private hashById = new Map<string, string>();
  private inflight = new Map<string, Promise<ApiKeyRecord | null>>();
  private sub?: Subscription;

  constructor(private db: Db, private ttlMs: number) {}

  listen(nc: NatsConnection): void {
    this.sub = nc.subscribe(subjects.keyInvalidated, {
      callback: (_err, msg) => {
        const parsed = KeyInvalidatedSchema.safeParse(safeJson(msg.data));
        if (parsed.success) this.invalidate(parsed.data.key_id);
      },
    });
  }

  invalidate(keyId: string): void {
    const hash = this.hashById.get(keyId);
    if (hash) this.byHash.delete(hash);
    this.hashById.delete(keyId);
  }

  /** Resolves the Authorization header to a live key, or throws the right 401. */
  async authenticate(authorization: string): Promise<ApiKeyRecord> {
    if (!authorization) throw errors.missingKey();
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!m) throw errors.missingKey();
    const hash = hashApiKey(m[1]).toString('hex');
    const now = Date.now();
    let entry = this.byHash.get(hash);
    if (!entry || entry.expires < now) {
      const record = await this.load(hash);
      entry = { record, expires: now + (record ? this.ttlMs : NEGATIVE_TTL_MS) };
      this.byHash.set(hash, entry);
      if (record) this.hashById.set(record.id, hash);
    }
    const record = entry.record;
    if (!record) throw errors.invalidKey();
    if (record.revoked_at) throw errors.revokedKey();
    if (record.expires_at && record.expires_at.getTime() <= now) throw errors.expiredKey();
    return record;
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
