import { randomBytes } from 'node:crypto';
import { hash, verify } from '@node-rs/argon2';
import type pg from 'pg';
import { withTransaction } from '../db/pool.ts';

// What the tenants' and the operators' sign-ins share: e-mail addresses as typed, argon2id
// passwords (checked in the same time whether the account exists or not), and the sign-in
// throttle, each app with its own table of failures, limits and advisory-lock namespaces.

// argon2id with OWASP's second recommended profile (19 MiB, t=2, p=1).
const ARGON2 = { algorithm: 2 as never, memoryCost: 19456, timeCost: 2, parallelism: 1 };
const EMAIL_RE = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{2,}$/;

export const normalizeEmail = (e: string) =>
  String(e ?? '')
    .trim()
    .toLowerCase();
export const validEmail = (e: string) => e.length <= 254 && EMAIL_RE.test(e);

export function hashPassword(pw: string): Promise<string> {
  return hash(pw, ARGON2);
}

// A fixed hash to verify against when the e-mail is unknown, so timing does not reveal accounts.
let dummyHash: Promise<string> | null = null;

/** Whether the password is the account's; without an account (no hash) a fixed hash is verified all the same, and the answer is false. */
export async function passwordMatches(passwordHash: string | null | undefined, password: string): Promise<boolean> {
  dummyHash ??= hashPassword(randomBytes(16).toString('hex'));
  if (passwordHash) return verify(passwordHash, password).catch(() => false);
  await verify(await dummyHash, password).catch(() => false);
  return false;
}

/**
 * One app's sign-in throttle, over its failed (or in-flight) attempts within `windowMin`:
 * `maxPerPair` per (e-mail, client address) pair and `maxPerIp` per address lock that pair or
 * address for the window; the e-mail as a whole (attempts from many addresses) has `emailFree`
 * free, then each further attempt must wait twice as long after the last failure as the one
 * before (1 s, 2 s, 4 s … at most `emailMaxDelayS`): wrong passwords from anywhere never lock the
 * owner out, and guessing from many addresses stays slow.
 */
export interface LoginThrottleLimits {
  /** The table of attempts: id, email, ip, created_at (and kind, with maxCodes). */
  table: 'portal_login_failures' | 'operator_login_failures';
  /** Advisory lock namespaces (first key of pg_advisory_xact_lock(int, int); the second is hashtext() of the e-mail or address). */
  locks: { email: number; ip: number };
  windowMin: number;
  maxPerPair: number;
  maxPerIp: number;
  emailFree: number;
  emailMaxDelayS: number;
  /**
   * A second factor: rows of kind 'code' (a wrong code after a right password) lock the e-mail at
   * this many, and the pair's and the e-mail's counts take only rows of kind 'password'.
   */
  maxCodes?: number;
}

export type LoginReservation = { ok: true; id: string } | { ok: false; minutes: number } | { ok: false; seconds: number };

export interface LoginThrottle {
  /**
   * Atomic: under advisory locks on the e-mail and on the address (always in that order), counts
   * the attempts of the window and, when under every limit, records this one (kind 'password')
   * BEFORE the password is checked. Parallel attempts therefore see each other: of 50 simultaneous
   * wrong passwords for one e-mail from one address, exactly `maxPerPair` are checked.
   */
  reserve(db: pg.Pool, email: string, ip: string): Promise<LoginReservation>;
  /** A successful sign-in deletes the rows of its own (e-mail, address) pair, and no one else's. */
  clear(db: pg.Pool, email: string, ip: string): Promise<void>;
}

export function loginThrottle(o: LoginThrottleLimits): LoginThrottle {
  const codes = o.maxCodes !== undefined;
  const password = codes ? ` and kind = 'password'` : '';
  const count = `select count(*) filter (where email = $1 and ip = $2${password})::int as by_pair,
              count(*) filter (where ip = $2)::int as by_ip,
              count(*) filter (where email = $1${password})::int as by_email,
              ${codes ? `count(*) filter (where email = $1 and kind = 'code')::int` : '0'} as codes,
              extract(epoch from now() - max(created_at) filter (where email = $1${password}))::float8 as since_last_s
         from ${o.table} where created_at > now() - make_interval(mins => $3) and (email = $1 or ip = $2)`;
  const record = codes
    ? `insert into ${o.table} (email, ip, kind) values ($1, $2, 'password') returning id::text as id`
    : `insert into ${o.table} (email, ip) values ($1, $2) returning id::text as id`;
  return {
    reserve: (db, email, ip) =>
      withTransaction(db, async (c) => {
        await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [o.locks.email, email]);
        await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [o.locks.ip, ip]);
        const r = (await c.query(count, [email, ip, o.windowMin])).rows[0];
        if (r.by_pair >= o.maxPerPair || r.by_ip >= o.maxPerIp || (o.maxCodes !== undefined && r.codes >= o.maxCodes))
          return { ok: false, minutes: o.windowMin };
        if (r.by_email >= o.emailFree) {
          const delay = Math.min(2 ** (r.by_email - o.emailFree), o.emailMaxDelayS);
          if (r.since_last_s < delay) return { ok: false, seconds: Math.max(1, Math.ceil(delay - r.since_last_s)) };
        }
        const { rows } = await c.query(record, [email, ip]);
        return { ok: true, id: rows[0].id };
      }),
    clear: async (db, email, ip) => {
      await db.query(`delete from ${o.table} where email = $1 and ip = $2`, [email, ip]);
    },
  };
}
