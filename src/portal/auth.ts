import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { hash, verify } from '@node-rs/argon2';
import { createId } from '@paralleldrive/cuid2';
import type pg from 'pg';
import { createTenant } from '../db/tenants.ts';
import { withTransaction, type DbClient } from '../db/pool.ts';

// argon2id with OWASP's second recommended profile (19 MiB, t=2, p=1).
const ARGON2 = { algorithm: 2 as never, memoryCost: 19456, timeCost: 2, parallelism: 1 };
/** Absolute lifetime of a session. */
export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000;
/** A session with no request for this long is expired (sliding). */
export const SESSION_IDLE_MS = 30 * 60 * 1000;
/** last_seen_at is written at most this often (one UPDATE per session per minute, not per request). */
export const SESSION_TOUCH_MS = 60 * 1000;
export const MIN_PASSWORD = 10;
const EMAIL_RE = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{2,}$/;

/** Login throttle: per e-mail and per client address, failed (or in-flight) attempts within the window. */
export const LOGIN_WINDOW_MIN = 15;
export const LOGIN_MAX_PER_EMAIL = 5;
export const LOGIN_MAX_PER_IP = 30;
/** Sign-up throttle: attempts per client address per hour (PORTAL_SIGNUP_LIMIT_PER_HOUR). */
export const SIGNUP_WINDOW_MIN = 60;
export const SIGNUP_MAX_PER_IP = 10;

// Advisory lock namespaces (first key of pg_advisory_xact_lock(int, int)); the second key is
// hashtext() of the e-mail or address. A hash collision only serializes two unrelated attempts.
const LOCK_LOGIN_EMAIL = 7261101;
const LOCK_LOGIN_IP = 7261102;
const LOCK_SIGNUP_IP = 7261103;

export interface User {
  id: string;
  tenant_id: string;
  email: string;
  created_at: Date;
}
export interface Session {
  user: User;
  csrf: string;
  idHash: Buffer;
}

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

/**
 * Counts and records one sign-up attempt of a client address atomically (advisory lock on the
 * address): at most `max` per SIGNUP_WINDOW_MIN, however many arrive in parallel.
 */
export async function reserveSignupAttempt(db: pg.Pool, ip: string, max = SIGNUP_MAX_PER_IP): Promise<boolean> {
  return withTransaction(db, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_SIGNUP_IP, ip]);
    const { rows } = await c.query('select count(*)::int as n from portal_signup_attempts where ip = $1 and created_at > now() - make_interval(mins => $2)', [
      ip,
      SIGNUP_WINDOW_MIN,
    ]);
    if (rows[0].n >= max) return false;
    await c.query('insert into portal_signup_attempts (ip) values ($1)', [ip]);
    return true;
  });
}

export async function signUp(
  db: pg.Pool,
  a: { email: string; password: string; orgName?: string; ip: string; maxPerIp?: number },
): Promise<{ ok: true; user: User } | { ok: false; error: 'bad_email' | 'weak_password' | 'email_taken' | 'rate_limited' }> {
  const email = normalizeEmail(a.email);
  if (!validEmail(email)) return { ok: false, error: 'bad_email' };
  if (String(a.password ?? '').length < MIN_PASSWORD || a.password.length > 1024) return { ok: false, error: 'weak_password' };
  // Counted once the form is well formed, before the (costly) hash; a taken e-mail counts too.
  if (!(await reserveSignupAttempt(db, a.ip, a.maxPerIp))) return { ok: false, error: 'rate_limited' };
  const passwordHash = await hashPassword(a.password);
  try {
    const user = await withTransaction(db, async (c) => {
      const tenant = await createTenant(c, (a.orgName ?? '').trim().slice(0, 100) || email);
      const { rows } = await c.query(
        'insert into portal_users (id, tenant_id, email, password_hash) values ($1, $2, $3, $4) returning id, tenant_id, email, created_at',
        [`usr_${createId()}`, tenant.id, email, passwordHash],
      );
      return rows[0] as User;
    });
    return { ok: true, user };
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return { ok: false, error: 'email_taken' };
    throw err;
  }
}

/**
 * Login throttle, atomic: under advisory locks on the e-mail and on the address (always in that
 * order), counts the failed or in-flight attempts of the window and, when under both limits,
 * records this attempt BEFORE the password is checked. Parallel attempts therefore see each
 * other: of 50 simultaneous wrong passwords for one e-mail, exactly LOGIN_MAX_PER_EMAIL are
 * checked. A successful sign-in deletes the e-mail's rows (this one included).
 */
export async function reserveLoginAttempt(db: pg.Pool, email: string, ip: string): Promise<boolean> {
  return withTransaction(db, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_LOGIN_EMAIL, email]);
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_LOGIN_IP, ip]);
    const { rows } = await c.query(
      `select count(*) filter (where email = $1)::int as by_email, count(*) filter (where ip = $2)::int as by_ip
         from portal_login_failures where created_at > now() - make_interval(mins => $3) and (email = $1 or ip = $2)`,
      [email, ip, LOGIN_WINDOW_MIN],
    );
    if (rows[0].by_email >= LOGIN_MAX_PER_EMAIL || rows[0].by_ip >= LOGIN_MAX_PER_IP) return false;
    await c.query('insert into portal_login_failures (email, ip) values ($1, $2)', [email, ip]);
    return true;
  });
}

export async function logIn(
  db: pg.Pool,
  a: { email: string; password: string; ip: string },
): Promise<{ ok: true; user: User } | { ok: false; error: 'rate_limited' | 'bad_credentials' }> {
  const email = normalizeEmail(a.email).slice(0, 254);
  if (!(await reserveLoginAttempt(db, email, a.ip))) return { ok: false, error: 'rate_limited' };
  const { rows } = await db.query('select id, tenant_id, email, created_at, password_hash from portal_users where email = $1', [email]);
  const row = rows[0];
  const pw = String(a.password ?? '').slice(0, 1024);
  dummyHash ??= hashPassword(randomBytes(16).toString('hex'));
  const ok = row ? await verify(row.password_hash, pw).catch(() => false) : (await verify(await dummyHash, pw).catch(() => false)) && false;
  // A failure keeps the row recorded above; it counts for LOGIN_WINDOW_MIN.
  if (!ok) return { ok: false, error: 'bad_credentials' };
  await db.query('delete from portal_login_failures where email = $1', [email]);
  const { password_hash: _h, ...user } = row;
  return { ok: true, user };
}

const sha256 = (s: string) => createHash('sha256').update(s).digest();

/** Creates a session; returns the cookie token (only its SHA-256 is stored). */
export async function createSession(db: DbClient, userId: string): Promise<{ token: string; csrf: string }> {
  const token = randomBytes(32).toString('base64url');
  const csrf = randomBytes(32).toString('base64url');
  await db.query('insert into portal_sessions (id, user_id, csrf_secret, expires_at) values ($1, $2, $3, $4)', [
    sha256(token),
    userId,
    csrf,
    new Date(Date.now() + SESSION_TTL_MS),
  ]);
  return { token, csrf };
}

export async function loadSession(db: DbClient, token: string | undefined, idleMs = SESSION_IDLE_MS): Promise<Session | null> {
  if (!token || token.length > 100) return null;
  const idHash = sha256(token);
  const { rows } = await db.query(
    `select s.csrf_secret, s.last_seen_at < now() - make_interval(secs => $3) as stale, u.id, u.tenant_id, u.email, u.created_at
       from portal_sessions s join portal_users u on u.id = s.user_id
      where s.id = $1 and s.expires_at > now() and s.last_seen_at > now() - make_interval(secs => $2)`,
    [idHash, idleMs / 1000, SESSION_TOUCH_MS / 1000],
  );
  if (!rows[0]) return null;
  const { csrf_secret, stale, ...user } = rows[0];
  if (stale) await db.query('update portal_sessions set last_seen_at = now() where id = $1', [idHash]);
  return { user, csrf: csrf_secret, idHash };
}

export async function destroySession(db: DbClient, idHash: Buffer): Promise<void> {
  await db.query('delete from portal_sessions where id = $1', [idHash]);
}

/** Deletes the session a cookie token names, whoever it belongs to (sign-in rotates the id). */
export async function destroySessionToken(db: DbClient, token: string | undefined): Promise<void> {
  if (token && token.length <= 100) await destroySession(db, sha256(token));
}

export async function purgeExpired(db: DbClient): Promise<void> {
  await db.query('delete from portal_sessions where expires_at < now() or last_seen_at < now() - make_interval(secs => $1)', [SESSION_IDLE_MS / 1000]);
  await db.query(`delete from portal_login_failures where created_at < now() - interval '1 day'`);
  await db.query(`delete from portal_signup_attempts where created_at < now() - interval '1 day'`);
}

export function tokensEqual(a: string | undefined | null, b: string | undefined | null): boolean {
  if (!a || !b) return false;
  const ba = Buffer.from(a);
  const bb = Buffer.from(b);
  return ba.length === bb.length && timingSafeEqual(ba, bb);
}
