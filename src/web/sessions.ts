import { timingSafeEqual } from 'node:crypto';
import { createHash, randomBytes } from 'node:crypto';
import type { DbClient } from '../db/pool.ts';

// Server-side sessions of a web app, the way the portal keeps its own (src/portal/auth.ts): the
// browser holds a random token, the table only its SHA-256, with a CSRF secret (the synchronizer
// token of the app's forms), an absolute lifetime and a sliding idle timeout; last_seen_at is
// written at most once per `touchMs`. One store per table: the console's operator_sessions
// (operator_id). The table needs the columns id bytea, <subject>, csrf_secret, ip, created_at,
// last_seen_at, expires_at.

export interface SessionStoreOptions {
  table: string;
  /** The column naming whose session it is (operator_id). */
  subject: string;
  ttlMs: number;
  idleMs: number;
  touchMs: number;
  /** Whether the table has an `ip` column recording where the session was opened (default true). */
  recordsIp?: boolean;
}

export interface StoredSession {
  subjectId: string;
  csrf: string;
  idHash: Buffer;
}

export interface SessionStore {
  /** A new session; returns the cookie token (only its SHA-256 is stored) and its CSRF secret. */
  create(db: DbClient, subjectId: string, ip?: string): Promise<{ token: string; csrf: string }>;
  /** The live session of a cookie token (touching it), or null. */
  load(db: DbClient, token: string | undefined): Promise<StoredSession | null>;
  destroy(db: DbClient, idHash: Buffer): Promise<void>;
  destroyToken(db: DbClient, token: string | undefined): Promise<void>;
  destroyAllOf(db: DbClient, subjectId: string): Promise<void>;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;
export const sha256 = (s: string) => createHash('sha256').update(s).digest();

export function sessionStore(o: SessionStoreOptions): SessionStore {
  if (!IDENTIFIER.test(o.table) || !IDENTIFIER.test(o.subject)) throw new Error(`not a table or column name: ${o.table}.${o.subject}`);
  const { table, subject } = o;
  const destroy = async (db: DbClient, idHash: Buffer) => {
    await db.query(`delete from ${table} where id = $1`, [idHash]);
  };
  return {
    async create(db, subjectId, ip) {
      const token = randomBytes(32).toString('base64url');
      const csrf = randomBytes(32).toString('base64url');
      const expires = new Date(Date.now() + o.ttlMs);
      if (o.recordsIp === false)
        await db.query(`insert into ${table} (id, ${subject}, csrf_secret, expires_at) values ($1, $2, $3, $4)`, [sha256(token), subjectId, csrf, expires]);
      else
        await db.query(`insert into ${table} (id, ${subject}, csrf_secret, ip, expires_at) values ($1, $2, $3, $4, $5)`, [
          sha256(token),
          subjectId,
          csrf,
          ip ?? null,
          expires,
        ]);
      return { token, csrf };
    },
    async load(db, token) {
      if (!token || token.length > 100) return null;
      const idHash = sha256(token);
      const { rows } = await db.query(
        `select ${subject} as subject_id, csrf_secret, last_seen_at < now() - make_interval(secs => $3) as stale from ${table}
          where id = $1 and expires_at > now() and last_seen_at > now() - make_interval(secs => $2)`,
        [idHash, o.idleMs / 1000, o.touchMs / 1000],
      );
      if (!rows[0]) return null;
      if (rows[0].stale) await db.query(`update ${table} set last_seen_at = now() where id = $1`, [idHash]);
      return { subjectId: rows[0].subject_id, csrf: rows[0].csrf_secret, idHash };
    },
    destroy,
    async destroyToken(db, token) {
      if (token && token.length <= 100) await destroy(db, sha256(token));
    },
    async destroyAllOf(db, subjectId) {
      await db.query(`delete from ${table} where ${subject} = $1`, [subjectId]);
    },
  };
}

/** Two secrets compared in constant time (CSRF tokens, signatures). */
export function tokensEqual(a: string | undefined | null, b: string | undefined | null): boolean {
  if (!a || !b) return false;
  const ba = Buffer.from(a);
  const bb = Buffer.from(b);
  return ba.length === bb.length && timingSafeEqual(ba, bb);
}
