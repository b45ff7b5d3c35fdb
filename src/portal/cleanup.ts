import type { DbClient } from '../db/pool.ts';
import { LOGIN_WINDOW_MIN, SESSION_IDLE_MS, SIGNUP_WINDOW_MIN } from './auth.ts';
import { FLASH_TTL_S } from './flash.ts';

// The portal's periodic cleanup: every table a request can add rows to is emptied of what no
// longer counts — sign-in failures and sign-up attempts past their throttle windows, expired
// sessions, flashes and e-mail links, invitations a week past their expiry, webhook audit rows
// past PIX_WEBHOOK_RETENTION_DAYS, and sign-ups whose address was never verified within
// PORTAL_UNVERIFIED_SIGNUP_DAYS (with their company when nothing else was made in it). At most
// `batch` rows per table and pass, so one pass is a bounded amount of work however far behind it
// is; the portal runs a pass every minute (src/portal/server.ts).

export const CLEANUP_BATCH = 5000;
export const CLEANUP_INTERVAL_MS = 60_000;

export interface CleanupResult {
  sessions: number;
  flash: number;
  loginFailures: number;
  signupAttempts: number;
  emailTokens: number;
  webhookEvents: number;
  invitations: number;
  /** logins of sign-ups never verified */
  unverifiedUsers: number;
  /** their companies (tenants), gone with them */
  unverifiedTenants: number;
}

/** PORTAL_UNVERIFIED_SIGNUP_DAYS's default (src/config.ts): a week to open the verification link. */
export const UNVERIFIED_SIGNUP_DAYS = 7;

/** An invitation is kept this long past its expiry (the members page shows it expired, then it goes). */
export const INVITATION_KEEP_DAYS = 7;

/** Deletes up to `batch` rows of `table` (key column `key`) matching `where`. */
async function deleteSome(db: DbClient, table: string, key: string, where: string, params: unknown[], batch: number): Promise<number> {
  const n = params.length + 1;
  const r = await db.query(`delete from ${table} where ${key} in (select ${key} from ${table} where ${where} limit $${n})`, [...params, batch]);
  return r.rowCount ?? 0;
}

/**
 * Sign-ups whose address was never verified, `days` after they were made: up to `batch` logins
 * (their sessions and e-mail links go with them) and their tenants. A login alone in its tenant goes
 * with the tenant only when nothing else was made in it — no ledger row, no key, no Pix charge, no
 * notification setting or endpoint, no invitation — else both stay (someone uses it: an operator's
 * grant, keys in use). A login that shares its tenant goes alone, unless it is its only owner. The
 * address is free for a new sign-up afterwards.
 */
export async function purgeUnverifiedSignups(db: DbClient, days: number, batch: number): Promise<{ users: number; tenants: number }> {
  if (days <= 0) return { users: 0, tenants: 0 };
  // One statement: the logins and their tenants go together or not at all (the foreign keys are
  // checked at its end, when the logins are gone; a key made meanwhile fails it, and the next pass
  // decides again). A login verified meanwhile is not deleted (the delete checks it again once it
  // holds the row).
  const { rows } = await db.query(
    `with judged as (
       select u.id, u.tenant_id,
              exists (select 1 from portal_users o where o.tenant_id = u.tenant_id and o.id <> u.id) as shared,
              u.role <> 'owner' or exists (select 1 from portal_users o where o.tenant_id = u.tenant_id and o.id <> u.id and o.role = 'owner') as not_last_owner,
              exists (select 1 from ledger l where l.tenant_id = u.tenant_id)
                or exists (select 1 from api_keys k where k.tenant_id = u.tenant_id)
                or exists (select 1 from pix_charges p where p.tenant_id = u.tenant_id)
                or exists (select 1 from notify_tenants n where n.tenant_id = u.tenant_id)
                or exists (select 1 from notify_endpoints e where e.tenant_id = u.tenant_id)
                or exists (select 1 from portal_invitations i where i.tenant_id = u.tenant_id) as used
         from portal_users u
        where u.email_verified_at is null and u.created_at < now() - make_interval(days => $1)
     ), doomed as (
       -- only what goes (what stays must not take the batch of every pass)
       select j.id, j.tenant_id, j.shared from judged j
        where j.shared and j.not_last_owner or not j.shared and not j.used
        limit $2
     ), users_gone as (
       delete from portal_users u using doomed d where u.id = d.id and u.email_verified_at is null returning u.tenant_id, d.shared
     ), tenants_gone as (
       delete from tenants t using users_gone g where t.id = g.tenant_id and not g.shared returning t.id
     )
     select (select count(*) from users_gone)::int as users, (select count(*) from tenants_gone)::int as tenants`,
    [days, batch],
  );
  return rows[0];
}

export async function cleanUp(db: DbClient, o: { webhookRetentionDays: number; unverifiedDays?: number; batch?: number }): Promise<CleanupResult> {
  const batch = o.batch ?? CLEANUP_BATCH;
  const tables = await cleanUpTables(db, o.webhookRetentionDays, batch);
  const signups = await purgeUnverifiedSignups(db, o.unverifiedDays ?? UNVERIFIED_SIGNUP_DAYS, batch);
  return { ...tables, unverifiedUsers: signups.users, unverifiedTenants: signups.tenants };
}

async function cleanUpTables(db: DbClient, webhookRetentionDays: number, batch: number): Promise<Omit<CleanupResult, 'unverifiedUsers' | 'unverifiedTenants'>> {
  return {
    sessions: await deleteSome(
      db,
      'portal_sessions',
      'id',
      'expires_at < now() or last_seen_at < now() - make_interval(secs => $1)',
      [SESSION_IDLE_MS / 1000],
      batch,
    ),
    flash: await deleteSome(db, 'portal_flash', 'id', 'created_at < now() - make_interval(secs => $1)', [FLASH_TTL_S], batch),
    loginFailures: await deleteSome(db, 'portal_login_failures', 'id', 'created_at < now() - make_interval(mins => $1)', [LOGIN_WINDOW_MIN], batch),
    signupAttempts: await deleteSome(db, 'portal_signup_attempts', 'id', 'created_at < now() - make_interval(mins => $1)', [SIGNUP_WINDOW_MIN], batch),
    // (kept for the hour in which they count against MAIL_MAX_PER_USER_PER_HOUR, even if expired sooner)
    emailTokens: await deleteSome(db, 'portal_email_tokens', 'id', "expires_at < now() and created_at < now() - interval '1 hour'", [], batch),
    webhookEvents:
      webhookRetentionDays > 0
        ? await deleteSome(db, 'pix_webhook_events', 'id', 'created_at < now() - make_interval(days => $1)', [webhookRetentionDays], batch)
        : 0,
    invitations: await deleteSome(db, 'portal_invitations', 'id', 'expires_at < now() - make_interval(days => $1)', [INVITATION_KEEP_DAYS], batch),
  };
}
