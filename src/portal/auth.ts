import { createId } from '@paralleldrive/cuid2';
import type pg from 'pg';
import { createTenant } from '../db/tenants.ts';
import { withTransaction, type DbClient } from '../db/pool.ts';
import { sessionStore, sha256 } from '../web/sessions.ts';
import { hashPassword, loginThrottle, normalizeEmail, passwordMatches, validEmail } from '../web/sign-in.ts';
import type { Role } from '../db/members.ts';

/** Absolute lifetime of a session. */
export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000;
/** A session with no request for this long is expired (sliding). */
export const SESSION_IDLE_MS = 30 * 60 * 1000;
/** last_seen_at is written at most this often (one UPDATE per session per minute, not per request). */
export const SESSION_TOUCH_MS = 60 * 1000;
export const MIN_PASSWORD = 10;

/**
 * Login throttle, failed (or in-flight) attempts within LOGIN_WINDOW_MIN: 5 per (e-mail, client
 * address) pair and 30 per address lock that pair or address for the window. The e-mail as a
 * whole (attempts from many addresses) has 10 free, then each further attempt must wait twice as
 * long after the last failure as the one before (1 s, 2 s, 4 s … at most LOGIN_EMAIL_MAX_DELAY_S):
 * wrong passwords from anywhere no longer lock the owner out, and guessing from many addresses
 * stays slow.
 */
export const LOGIN_WINDOW_MIN = 15;
export const LOGIN_MAX_PER_PAIR = 5;
export const LOGIN_MAX_PER_IP = 30;
export const LOGIN_EMAIL_FREE = 10;
export const LOGIN_EMAIL_MAX_DELAY_S = 900;
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
  /** null until the address is verified by the link e-mailed at sign-up (needed for a top-up) */
  email_verified_at: Date | null;
  /** what the user may do in its tenant (src/portal/roles.ts); who signs up owns the new tenant */
  role: Role;
}
export interface Session {
  user: User;
  csrf: string;
  idHash: Buffer;
}

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

export type SignUpResult = { ok: true; user: User; created: boolean } | { ok: false; error: 'bad_email' | 'weak_password' | 'rate_limited' };

/**
 * A sign-up. The answer does not tell whether the e-mail had an account: `created` is for the
 * caller's e-mail (a verification link, or a notice to the existing account), never for the page.
 * Both paths hash the password and write, so their timing is alike.
 */
export async function signUp(db: pg.Pool, a: { email: string; password: string; orgName?: string; ip: string; maxPerIp?: number }): Promise<SignUpResult> {
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
        `insert into portal_users (id, tenant_id, email, password_hash) values ($1, $2, $3, $4)
         returning id, tenant_id, email, created_at, email_verified_at, role`,
        [`usr_${createId()}`, tenant.id, email, passwordHash],
      );
      return rows[0] as User;
    });
    return { ok: true, user, created: true };
  } catch (err) {
    if ((err as { code?: string }).code !== '23505') throw err;
    const { rows } = await db.query('select id, tenant_id, email, created_at, email_verified_at, role from portal_users where email = $1', [email]);
    if (!rows[0]) throw err;
    return { ok: true, user: rows[0] as User, created: false };
  }
}

/** The login throttle of LOGIN_WINDOW_MIN and the limits above, over portal_login_failures (src/web/sign-in.ts). */
const loginAttempts = loginThrottle({
  table: 'portal_login_failures',
  locks: { email: LOCK_LOGIN_EMAIL, ip: LOCK_LOGIN_IP },
  windowMin: LOGIN_WINDOW_MIN,
  maxPerPair: LOGIN_MAX_PER_PAIR,
  maxPerIp: LOGIN_MAX_PER_IP,
  emailFree: LOGIN_EMAIL_FREE,
  emailMaxDelayS: LOGIN_EMAIL_MAX_DELAY_S,
});

export async function logIn(
  db: pg.Pool,
  a: { email: string; password: string; ip: string },
): Promise<{ ok: true; user: User } | { ok: false; error: 'rate_limited'; minutes?: number; seconds?: number } | { ok: false; error: 'bad_credentials' }> {
  const email = normalizeEmail(a.email).slice(0, 254);
  const reserved = await loginAttempts.reserve(db, email, a.ip);
  if (!reserved.ok) return { error: 'rate_limited', ...reserved };
  const { rows } = await db.query('select id, tenant_id, email, created_at, email_verified_at, role, password_hash from portal_users where email = $1', [
    email,
  ]);
  const row = rows[0];
  const pw = String(a.password ?? '').slice(0, 1024);
  const ok = await passwordMatches(row?.password_hash, pw);
  // A failure keeps the row recorded above; it counts for LOGIN_WINDOW_MIN.
  if (!ok) return { ok: false, error: 'bad_credentials' };
  await loginAttempts.clear(db, email, a.ip);
  const { password_hash: _h, ...user } = row;
  return { ok: true, user };
}

/** The portal's sessions (src/web/sessions.ts); loadSession below reads the member in the same query. */
const sessions = sessionStore({
  table: 'portal_sessions',
  subject: 'user_id',
  ttlMs: SESSION_TTL_MS,
  idleMs: SESSION_IDLE_MS,
  touchMs: SESSION_TOUCH_MS,
  recordsIp: false,
});

/** Creates a session; returns the cookie token (only its SHA-256 is stored). */
export const createSession = (db: DbClient, userId: string): Promise<{ token: string; csrf: string }> => sessions.create(db, userId);

export async function loadSession(db: DbClient, token: string | undefined, idleMs = SESSION_IDLE_MS): Promise<Session | null> {
  if (!token || token.length > 100) return null;
  const idHash = sha256(token);
  const { rows } = await db.query(
    `select s.csrf_secret, s.last_seen_at < now() - make_interval(secs => $3) as stale, u.id, u.tenant_id, u.email, u.created_at, u.email_verified_at, u.role
       from portal_sessions s join portal_users u on u.id = s.user_id
      where s.id = $1 and s.expires_at > now() and s.last_seen_at > now() - make_interval(secs => $2)`,
    [idHash, idleMs / 1000, SESSION_TOUCH_MS / 1000],
  );
  if (!rows[0]) return null;
  const { csrf_secret, stale, ...user } = rows[0];
  if (stale) await db.query('update portal_sessions set last_seen_at = now() where id = $1', [idHash]);
  return { user, csrf: csrf_secret, idHash };
}

export const destroySession = (db: DbClient, idHash: Buffer): Promise<void> => sessions.destroy(db, idHash);

/** Deletes the session a cookie token names, whoever it belongs to (sign-in rotates the id). */
export const destroySessionToken = (db: DbClient, token: string | undefined): Promise<void> => sessions.destroyToken(db, token);
