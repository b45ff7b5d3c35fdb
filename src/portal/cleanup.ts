import type { DbClient } from '../db/pool.ts';
import { LOGIN_WINDOW_MIN, SESSION_IDLE_MS, SIGNUP_WINDOW_MIN } from './auth.ts';
import { FLASH_TTL_S } from './flash.ts';

// The portal's periodic cleanup: every table a request can add rows to is emptied of what no
// longer counts — sign-in failures and sign-up attempts past their throttle windows, expired
// sessions, flashes and e-mail links, invitations a week past their expiry, and webhook audit rows past PIX_WEBHOOK_RETENTION_DAYS. At
// most `batch` rows per table and pass, so one pass is a bounded amount of work however far
// behind it is; the portal runs a pass every minute (src/portal/server.ts).

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
}

/** An invitation is kept this long past its expiry (the members page shows it expired, then it goes). */
export const INVITATION_KEEP_DAYS = 7;

/** Deletes up to `batch` rows of `table` (key column `key`) matching `where`. */
async function deleteSome(db: DbClient, table: string, key: string, where: string, params: unknown[], batch: number): Promise<number> {
  const n = params.length + 1;
  const r = await db.query(`delete from ${table} where ${key} in (select ${key} from ${table} where ${where} limit $${n})`, [...params, batch]);
  return r.rowCount ?? 0;
}

export async function cleanUp(db: DbClient, o: { webhookRetentionDays: number; batch?: number }): Promise<CleanupResult> {
  const batch = o.batch ?? CLEANUP_BATCH;
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
      o.webhookRetentionDays > 0
        ? await deleteSome(db, 'pix_webhook_events', 'id', 'created_at < now() - make_interval(days => $1)', [o.webhookRetentionDays], batch)
        : 0,
    invitations: await deleteSome(db, 'portal_invitations', 'id', 'expires_at < now() - make_interval(days => $1)', [INVITATION_KEEP_DAYS], batch),
  };
}
