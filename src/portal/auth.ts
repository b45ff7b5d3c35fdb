import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { hash, verify } from '@node-rs/argon2';
import { createId } from '@paralleldrive/cuid2';
import type pg from 'pg';
import { createTenant } from '../db/tenants.ts';
import { withTransaction, type DbClient } from '../db/pool.ts';

// argon2id with OWASP's second recommended profile (19 MiB, t=2, p=1).
const ARGON2 = { algorithm: 2 as never, memoryCost: 19456, timeCost: 2, parallelism: 1 };
export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000;
export const MIN_PASSWORD = 10;
const EMAIL_RE = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{2,}$/;

/** Login throttle: per e-mail and per client address, failures within the window. */
export const LOGIN_WINDOW_MIN = 15;
export const LOGIN_MAX_PER_EMAIL = 5;
export const LOGIN_MAX_PER_IP = 30;

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

export const normalizeEmail = (e: string) => String(e ?? '').trim().toLowerCase();
export const validEmail = (e: string) => e.length <= 254 && EMAIL_RE.test(e);

export function hashPassword(pw: string): Promise<string> {
  return hash(pw, ARGON2);
}

// A fixed hash to verify against when the e-mail is unknown, so timing does not reveal accounts.
let dummyHash: Promise<string> | null = null;

export async function signUp(db: pg.Pool, a: { email: string; password: string; orgName?: string }): Promise<{ ok: true; user: User } | { ok: false; error: 'bad_email' | 'weak_password' | 'email_taken' }> {
  const email = normalizeEmail(a.email);
  if (!validEmail(email)) return { ok: false, error: 'bad_email' };
  if (String(a.password ?? '').length < MIN_PASSWORD || a.password.length > 1024) return { ok: false, error: 'weak_password' };
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

export async function loginThrottled(db: DbClient, email: string, ip: string): Promise<boolean> {
  const { rows } = await db.query(
    `select count(*) filter (where email = $1)::int as by_email, count(*) filter (where ip = $2)::int as by_ip
       from portal_login_failures where created_at > now() - make_interval(mins => $3) and (email = $1 or ip = $2)`,
    [email, ip, LOGIN_WINDOW_MIN],
  );
  return rows[0].by_email >= LOGIN_MAX_PER_EMAIL || rows[0].by_ip >= LOGIN_MAX_PER_IP;
}

export async function logIn(db: pg.Pool, a: { email: string; password: string; ip: string }): Promise<{ ok: true; user: User } | { ok: false; error: 'rate_limited' | 'bad_credentials' }> {
  const email = normalizeEmail(a.email);
  if (await loginThrottled(db, email, a.ip)) return { ok: false, error: 'rate_limited' };
  const { rows } = await db.query('select id, tenant_id, email, created_at, password_hash from portal_users where email = $1', [email]);
  const row = rows[0];
  const pw = String(a.password ?? '').slice(0, 1024);
  dummyHash ??= hashPassword(randomBytes(16).toString('hex'));
  const ok = row ? await verify(row.password_hash, pw).catch(() => false) : (await verify(await dummyHash, pw).catch(() => false)) && false;
  if (!ok) {
    await db.query('insert into portal_login_failures (email, ip) values ($1, $2)', [email.slice(0, 254), a.ip]);
    return { ok: false, error: 'bad_credentials' };
  }
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
    sha256(token), userId, csrf, new Date(Date.now() + SESSION_TTL_MS),
  ]);
  return { token, csrf };
}

export async function loadSession(db: DbClient, token: string | undefined): Promise<Session | null> {
  if (!token || token.length > 100) return null;
  const idHash = sha256(token);
  const { rows } = await db.query(
    `select s.csrf_secret, u.id, u.tenant_id, u.email, u.created_at
       from portal_sessions s join portal_users u on u.id = s.user_id
      where s.id = $1 and s.expires_at > now()`,
    [idHash],
  );
  if (!rows[0]) return null;
  const { csrf_secret, ...user } = rows[0];
  return { user, csrf: csrf_secret, idHash };
}

export async function destroySession(db: DbClient, idHash: Buffer): Promise<void> {
  await db.query('delete from portal_sessions where id = $1', [idHash]);
}

export async function purgeExpired(db: DbClient): Promise<void> {
  await db.query('delete from portal_sessions where expires_at < now()');
  await db.query(`delete from portal_login_failures where created_at < now() - interval '1 day'`);
}

export function tokensEqual(a: string | undefined | null, b: string | undefined | null): boolean {
  if (!a || !b) return false;
  const ba = Buffer.from(a);
  const bb = Buffer.from(b);
  return ba.length === bb.length && timingSafeEqual(ba, bb);
}
