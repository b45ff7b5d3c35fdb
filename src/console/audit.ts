import type pg from 'pg';
import { type DbClient, withTransaction } from '../db/pool.ts';

// The console's audit log (console_audit, append-only in the database): every operator action,
// sign-in and failed sign-in. Grants, adjustments, key revocations and operator disabling write
// their row inside their SQL function (catraca_console_grant / _adjust / _revoke_key /
// _disable_operator), in the transaction of the change; everything else here, through
// catraca_console_audit, in the transaction of the change it records.

export const AUDIT_ACTIONS = [
  'login',
  'login_failed',
  'login_throttled',
  'totp_failed',
  'recovery_code_used',
  'logout',
  'grant',
  'adjustment',
  'suspend',
  'reactivate',
  'key_revoke',
  'price_change',
  'vendor_cost_change',
  'deployment_price_change',
  'ledger_check',
  'operator_create',
  'operator_disable',
  'operator_reset',
  'nfse_retry',
  'fx_pin',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export interface AuditEntry {
  operatorId: string | null;
  /** For a failed sign-in: the e-mail as typed. */
  operatorEmail?: string | null;
  action: AuditAction;
  ip: string;
  tenantId?: string | null;
  target?: string | null;
  reason?: string | null;
  before?: unknown;
  after?: unknown;
}

export async function audit(db: DbClient, e: AuditEntry): Promise<void> {
  // through catraca_console_audit (SECURITY DEFINER): the roles may not insert into console_audit
  await db.query('select catraca_console_audit($1, $2, $3, $4, $5, $6, $7, $8, $9)', [
    e.operatorId,
    e.operatorEmail ?? null,
    e.action,
    e.ip,
    e.tenantId ?? null,
    e.target ?? null,
    e.reason ?? null,
    e.before === undefined ? null : JSON.stringify(e.before),
    e.after === undefined ? null : JSON.stringify(e.after),
  ]);
}

/** How long one login_throttled row stands for an address: the sign-in throttle's window (OPERATOR_LOGIN_WINDOW_MIN). */
export const THROTTLE_AUDIT_WINDOW_MIN = 15;
const LOCK_THROTTLE_AUDIT = 7261203;

/**
 * A sign-in attempt the throttle held (429): one login_throttled row per address per
 * THROTTLE_AUDIT_WINDOW_MIN (under an advisory lock on the address, so parallel requests see each
 * other), so that a flood cannot grow the append-only table. True when this call wrote the row.
 */
export async function auditThrottled(db: pg.Pool, a: { ip: string; email: string; retryAfterS: number }): Promise<boolean> {
  return withTransaction(db, async (tx) => {
    await tx.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_THROTTLE_AUDIT, a.ip]);
    const { rowCount } = await tx.query(
      `select 1 from console_audit where action = 'login_throttled' and ip = $1 and at > now() - make_interval(mins => $2) limit 1`,
      [a.ip, THROTTLE_AUDIT_WINDOW_MIN],
    );
    if (rowCount) return false;
    await audit(tx, { operatorId: null, operatorEmail: a.email, action: 'login_throttled', ip: a.ip, after: { retry_after_s: a.retryAfterS } });
    return true;
  });
}

export interface AuditRow {
  id: string;
  at: Date;
  operator_id: string | null;
  operator: string | null;
  action: AuditAction;
  ip: string | null;
  tenant_id: string | null;
  target: string | null;
  reason: string | null;
  before: unknown;
  after: unknown;
}

export interface AuditFilter {
  action?: string;
  tenantId?: string;
  operatorId?: string;
}

export const AUDIT_PAGE_SIZE = 50;

/** Newest first; `limit` rows from `offset`. */
export async function listAudit(db: DbClient, f: AuditFilter, limit = AUDIT_PAGE_SIZE, offset = 0): Promise<AuditRow[]> {
  const { rows } = await db.query(
    `select a.id::text as id, a.at, a.operator_id, coalesce(o.email, a.operator_email) as operator, a.action, a.ip, a.tenant_id, a.target, a.reason,
            a.before, a.after
       from console_audit a left join operators o on o.id = a.operator_id
      where ($1::text is null or a.action = $1) and ($2::text is null or a.tenant_id = $2) and ($3::text is null or a.operator_id = $3)
      order by a.at desc, a.id desc limit $4 offset $5`,
    [f.action ?? null, f.tenantId ?? null, f.operatorId ?? null, limit, offset],
  );
  return rows;
}
