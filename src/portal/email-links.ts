import { createHash, randomBytes } from 'node:crypto';
import type pg from 'pg';
import { withTransaction } from '../db/pool.ts';
import { keysRevokedEvents, type NotifyEvent } from '../notify/events.ts';
import { hashPassword } from '../web/sign-in.ts';

// One-time links sent by e-mail (portal_email_tokens): `verify` proves the address before the
// first top-up; `reset` sets a new password (and proves the address too). The token is 256 random
// bits in the link; only its SHA-256 is stored. A link works once, before it expires. Each account
// gets at most MAIL_MAX_PER_USER_PER_HOUR links, so no one can make the portal bomb an address.

export type LinkPurpose = 'verify' | 'reset';
export const LINK_TTL_S: Record<LinkPurpose, number> = { verify: 24 * 3600, reset: 3600 };
export const MAIL_MAX_PER_USER_PER_HOUR = 5;
export const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;
const LOCK_USER_MAIL = 7261105;

const sha256 = (s: string) => createHash('sha256').update(s).digest();
/** What a link's token is stored as: its SHA-256. */
export const tokenHash = sha256;
/** A new link token: 256 random bits, base64url (43 characters, TOKEN_RE), and the hash to store. */
export function newLinkToken(): { token: string; hash: Buffer } {
  const token = randomBytes(32).toString('base64url');
  return { token, hash: sha256(token) };
}

/** A new link's token, or null when the account already got MAIL_MAX_PER_USER_PER_HOUR e-mails this hour. */
export async function issueLink(db: pg.Pool, a: { userId: string; email: string; purpose: LinkPurpose }): Promise<string | null> {
  return withTransaction(db, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_USER_MAIL, a.userId]);
    const { rows } = await c.query(`select count(*)::int as n from portal_email_tokens where user_id = $1 and created_at > now() - interval '1 hour'`, [
      a.userId,
    ]);
    if (rows[0].n >= MAIL_MAX_PER_USER_PER_HOUR) return null;
    const token = randomBytes(32).toString('base64url');
    await c.query('insert into portal_email_tokens (id, user_id, purpose, email, expires_at) values ($1, $2, $3, $4, now() + make_interval(secs => $5))', [
      sha256(token),
      a.userId,
      a.purpose,
      a.email,
      LINK_TTL_S[a.purpose],
    ]);
    return token;
  });
}

/** Whether a link could still be used (the reset form is shown only for one). */
export async function linkUsable(db: pg.Pool, token: string, purpose: LinkPurpose): Promise<boolean> {
  if (!TOKEN_RE.test(token)) return false;
  const { rows } = await db.query('select 1 from portal_email_tokens where id = $1 and purpose = $2 and used_at is null and expires_at > now()', [
    sha256(token),
    purpose,
  ]);
  return rows.length > 0;
}

/** Uses a verification link: the address it was sent to is verified. False when unknown, used, expired, or the account's address changed. */
export async function verifyEmail(db: pg.Pool, token: string): Promise<boolean> {
  if (!TOKEN_RE.test(token)) return false;
  return withTransaction(db, async (c) => {
    const { rows } = await c.query(
      `update portal_email_tokens set used_at = now() where id = $1 and purpose = 'verify' and used_at is null and expires_at > now() returning user_id, email`,
      [sha256(token)],
    );
    if (!rows[0]) return false;
    const r = await c.query('update portal_users set email_verified_at = coalesce(email_verified_at, now()) where id = $1 and email = $2', [
      rows[0].user_id,
      rows[0].email,
    ]);
    return (r.rowCount ?? 0) > 0;
  });
}

/**
 * Uses a reset link: the new password, the address verified, every session of the account ended
 * and its sign-in failures forgotten. An account that was never verified is being claimed by the
 * owner of the address: whatever was set up before (its API keys) is not trusted and is revoked.
 */
export async function resetPassword(
  db: pg.Pool,
  token: string,
  password: string,
): Promise<{ userId: string; tenantId: string; revokedKeys: string[]; events: NotifyEvent[] } | null> {
  if (!TOKEN_RE.test(token)) return null;
  const passwordHash = await hashPassword(password);
  return withTransaction(db, async (c) => {
    const { rows } = await c.query(
      `update portal_email_tokens set used_at = now() where id = $1 and purpose = 'reset' and used_at is null and expires_at > now() returning user_id, email`,
      [sha256(token)],
    );
    if (!rows[0]) return null;
    const { rows: users } = await c.query(
      `update portal_users u set password_hash = $3, email_verified_at = coalesce(u.email_verified_at, now())
         from portal_users old where u.id = old.id and u.id = $1 and u.email = $2
       returning u.tenant_id, old.email_verified_at is null as was_unverified`,
      [rows[0].user_id, rows[0].email, passwordHash],
    );
    if (!users[0]) return null;
    await c.query('delete from portal_sessions where user_id = $1', [rows[0].user_id]);
    await c.query('delete from portal_login_failures where email = $1', [rows[0].email]);
    const revoked = users[0].was_unverified
      ? (await c.query('update api_keys set revoked_at = now() where tenant_id = $1 and revoked_at is null returning id', [users[0].tenant_id])).rows.map(
          (k) => k.id as string,
        )
      : [];
    // key.revoked of each, in this transaction (published by the caller after the commit, else by the relay)
    const events = await keysRevokedEvents(c, revoked);
    return { userId: rows[0].user_id, tenantId: users[0].tenant_id, revokedKeys: revoked, events };
  });
}
