import type { DbClient } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { OPERATOR_LOGIN_RETENTION_MIN, OPERATOR_SESSION_IDLE_MS } from './auth.ts';

// The console's periodic cleanup, as the portal's (src/portal/cleanup.ts): the sign-in throttle's
// rows past OPERATOR_LOGIN_RETENTION_MIN (they count for OPERATOR_LOGIN_WINDOW_MIN only) and
// operator sessions past their expiry or idle timeout. At most `batch` rows per table and pass; the console runs a
// pass every minute (src/console/server.ts). The audit log is never cleaned: it is append-only.

export const CONSOLE_CLEANUP_BATCH = 5000;
export const CONSOLE_CLEANUP_INTERVAL_MS = 60_000;
const log = createLogger('console');

export interface ConsoleCleanupResult {
  loginFailures: number;
  sessions: number;
}

export async function cleanUpConsole(db: DbClient, o: { batch?: number; retentionMin?: number } = {}): Promise<ConsoleCleanupResult> {
  const batch = o.batch ?? CONSOLE_CLEANUP_BATCH;
  const failures = await db.query(
    `delete from operator_login_failures where id in
       (select id from operator_login_failures where created_at < now() - make_interval(mins => $1) limit $2)`,
    [o.retentionMin ?? OPERATOR_LOGIN_RETENTION_MIN, batch],
  );
  const sessions = await db.query(
    `delete from operator_sessions where id in
       (select id from operator_sessions where expires_at < now() or last_seen_at < now() - make_interval(secs => $1) limit $2)`,
    [OPERATOR_SESSION_IDLE_MS / 1000, batch],
  );
  return { loginFailures: failures.rowCount ?? 0, sessions: sessions.rowCount ?? 0 };
}

/** Runs cleanUpConsole every `intervalMs` (first pass at once); returns the stop function. Never throws (logged). */
export function startConsoleCleanup(db: DbClient, intervalMs = CONSOLE_CLEANUP_INTERVAL_MS): () => void {
  const pass = () =>
    cleanUpConsole(db).then(
      (r) => (r.loginFailures || r.sessions ? log.info('console cleanup', { ...r }) : undefined),
      (err) => log.warn('console cleanup failed', { err: err as Error }),
    );
  void pass();
  const timer = setInterval(pass, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
