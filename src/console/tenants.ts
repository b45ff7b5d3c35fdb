import type { DbClient } from '../db/pool.ts';

// Read models of the console's tenant pages: every tenant (the console's role reads across
// tenants), its spend by São Paulo day, its members, its statement.

export const TZ = 'America/Sao_Paulo';
/** Start of today in São Paulo, as a timestamptz expression. */
const SP_TODAY = `(date_trunc('day', now() at time zone '${TZ}') at time zone '${TZ}')`;

export interface TenantListRow {
  id: string;
  name: string;
  balance_micros: bigint;
  held_micros: bigint;
  suspended_at: Date | null;
  suspended_reason: string | null;
  created_at: Date;
  active_keys: number;
  spend_today_micros: bigint;
  spend_30d_micros: bigint;
  last_request_at: Date | null;
}

export const TENANTS_PAGE_SIZE = 50;

/**
 * Tenants whose name, id or a member's e-mail contains `q` (any case; empty: all), newest first,
 * with balance, held, spend today and over the last 30 São Paulo days (today included), last
 * request, live keys, status.
 */
export async function listTenants(db: DbClient, q: string, page: number, size = TENANTS_PAGE_SIZE): Promise<{ rows: TenantListRow[]; hasMore: boolean }> {
  const needle = q.trim().toLowerCase() || null;
  const { rows } = await db.query(
    `with t as (
       select * from tenants t
        where $1::text is null or strpos(lower(t.name), $1) > 0 or lower(t.id) = $1
           or exists (select 1 from portal_users u where u.tenant_id = t.id and strpos(u.email, $1) > 0)
        order by t.created_at desc, t.id limit $2 offset $3)
     select t.id, t.name, t.balance_micros, t.held_micros, t.suspended_at, t.suspended_reason, t.created_at,
            (select count(*) from api_keys k where k.tenant_id = t.id and k.revoked_at is null and (k.expires_at is null or k.expires_at > now()))::int as active_keys,
            coalesce((select sum(l.amount_micros) from ledger l where l.tenant_id = t.id and l.kind = 'debit' and l.source = 'request'
                       and l.created_at >= ${SP_TODAY}), 0)::bigint as spend_today_micros,
            coalesce((select sum(l.amount_micros) from ledger l where l.tenant_id = t.id and l.kind = 'debit' and l.source = 'request'
                       and l.created_at >= ${SP_TODAY} - interval '29 days'), 0)::bigint as spend_30d_micros,
            (select l.created_at from ledger l where l.tenant_id = t.id and l.source = 'request' order by l.created_at desc limit 1) as last_request_at
       from t order by t.created_at desc, t.id`,
    [needle, size + 1, (Math.max(1, page) - 1) * size],
  );
  return { rows: rows.slice(0, size), hasMore: rows.length > size };
}

export type TenantDetail = TenantListRow;

export async function getTenantDetail(db: DbClient, id: string): Promise<TenantDetail | null> {
  const { rows } = await db.query(
    `select t.id, t.name, t.balance_micros, t.held_micros, t.suspended_at, t.suspended_reason, t.created_at,
            (select count(*) from api_keys k where k.tenant_id = t.id and k.revoked_at is null and (k.expires_at is null or k.expires_at > now()))::int as active_keys,
            coalesce((select sum(l.amount_micros) from ledger l where l.tenant_id = t.id and l.kind = 'debit' and l.source = 'request'
                       and l.created_at >= ${SP_TODAY}), 0)::bigint as spend_today_micros,
            coalesce((select sum(l.amount_micros) from ledger l where l.tenant_id = t.id and l.kind = 'debit' and l.source = 'request'
                       and l.created_at >= ${SP_TODAY} - interval '29 days'), 0)::bigint as spend_30d_micros,
            (select l.created_at from ledger l where l.tenant_id = t.id and l.source = 'request' order by l.created_at desc limit 1) as last_request_at
       from tenants t where t.id = $1`,
    [id],
  );
  return rows[0] ?? null;
}

export interface StatementRow {
  id: string;
  kind: 'credit' | 'debit';
  amount_micros: bigint;
  balance_after_micros: bigint;
  source: string;
  request_id: string | null;
  ref_request_id: string | null;
  key_id: string | null;
  model: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  cost_micros: bigint | null;
  note: string | null;
  created_at: Date;
}

export const STATEMENT_PAGE_SIZE = 25;

/** The tenant's ledger, newest first; page is 1-based. */
export async function statement(db: DbClient, tenantId: string, page: number, size = STATEMENT_PAGE_SIZE): Promise<{ rows: StatementRow[]; hasMore: boolean }> {
  const { rows } = await db.query(
    `select id::text as id, kind, amount_micros, balance_after_micros, source, request_id, ref_request_id, key_id, model, input_tokens, output_tokens,
            cost_micros, note, created_at
       from ledger where tenant_id = $1 order by id desc limit $2 offset $3`,
    [tenantId, size + 1, (Math.max(1, page) - 1) * size],
  );
  return { rows: rows.slice(0, size), hasMore: rows.length > size };
}
