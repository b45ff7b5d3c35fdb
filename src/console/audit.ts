import type { DbClient } from '../db/pool.ts';

// The console's audit log (console_audit, append-only in the database): every operator action,
// sign-in and failed sign-in. Grants and adjustments write their row inside their SQL function
// (catraca_console_grant / _adjust), in the transaction that moves the money; everything else
// here, in the transaction of the change it records.

export const AUDIT_ACTIONS = [
  'login',
  'login_failed',
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
  await db.query(
    `insert into console_audit (operator_id, operator_email, action, ip, tenant_id, target, reason, before, after)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      e.operatorId,
      e.operatorEmail ?? null,
      e.action,
      e.ip,
      e.tenantId ?? null,
      e.target ?? null,
      e.reason ?? null,
      e.before === undefined ? null : JSON.stringify(e.before),
      e.after === undefined ? null : JSON.stringify(e.after),
    ],
  );
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
