import type { DbClient } from '../db/pool.ts';
import { DEFAULT_PERIOD_DAYS, lastDays, type Period, periodFilter, saoPauloDay, TENANT_TIME_ZONE } from './period.ts';

// Read models of the portal's usage pages. Every query is scoped by tenant.

/** Spend of one São Paulo day. */
export interface DaySpend {
  day: string;
  micros: bigint;
  requests: number;
}

// Spend is what requests cost: debits of source 'request' (a Pix refund is a debit, not spend).
const SPEND = `l.tenant_id = $1 and l.kind = 'debit' and l.source = 'request' and ${periodFilter('l', 2, 3, 4)}`;
const periodArgs = (tenantId: string, p: Period) => [tenantId, TENANT_TIME_ZONE, p.from, p.to];

/** Every day of the period (São Paulo days), with what requests cost that day; days without any are zero. */
export async function dailySpend(db: DbClient, tenantId: string, period: Period = lastDays(DEFAULT_PERIOD_DAYS)): Promise<DaySpend[]> {
  const { rows } = await db.query(
    `with spend as (
       select ${saoPauloDay('l', 2)} as day, sum(l.amount_micros)::bigint as micros, count(*)::int as requests
         from ledger l where ${SPEND} group by 1)
     select to_char(d.day, 'YYYY-MM-DD') as day, coalesce(s.micros, 0)::bigint as micros, coalesce(s.requests, 0)::int as requests
       from generate_series($3::date, $4::date, interval '1 day') as d(day) left join spend s on s.day = d.day::date
      order by d.day`,
    periodArgs(tenantId, period),
  );
  return rows;
}

export interface ModelSpend {
  model: string;
  requests: number;
  input_tokens: bigint;
  output_tokens: bigint;
  /** the part of micros that batch lines cost (docs/batch.md) */
  batch_micros: bigint;
  micros: bigint;
}

export async function spendByModel(db: DbClient, tenantId: string, period: Period = lastDays(DEFAULT_PERIOD_DAYS)): Promise<ModelSpend[]> {
  const { rows } = await db.query(
    `select l.model, count(*)::int as requests, coalesce(sum(l.input_tokens), 0)::bigint as input_tokens,
            coalesce(sum(l.output_tokens), 0)::bigint as output_tokens,
            coalesce(sum(l.amount_micros) filter (where l.batch_id is not null), 0)::bigint as batch_micros, sum(l.amount_micros)::bigint as micros
       from ledger l where ${SPEND}
      group by l.model order by micros desc, l.model`,
    periodArgs(tenantId, period),
  );
  return rows;
}

export interface KeySpend {
  key_id: string | null;
  label: string | null;
  key_hint: string | null;
  requests: number;
  micros: bigint;
}

export async function spendByKey(db: DbClient, tenantId: string, period: Period = lastDays(DEFAULT_PERIOD_DAYS)): Promise<KeySpend[]> {
  const { rows } = await db.query(
    `select s.key_id, k.label, k.key_hint, s.requests, s.micros
       from (select l.key_id, count(*)::int as requests, sum(l.amount_micros)::bigint as micros
               from ledger l where ${SPEND} group by l.key_id) s
       left join api_keys k on k.id = s.key_id and k.tenant_id = $1
      order by s.micros desc, s.key_id`,
    periodArgs(tenantId, period),
  );
  return rows;
}

export interface EndUserSpend {
  /** The client's own end user (OpenAI's `user`); null: requests that named none. */
  end_user: string | null;
  requests: number;
  micros: bigint;
}

export interface EndUsersSpend {
  /** The end users that spent most, at most `limit` of them. */
  rows: EndUserSpend[];
  /** How many end users spent in the period (requests naming none count as one). */
  groups: number;
}

/** The end users that spent most in the period, and how many there were (the usage export has them all). */
export async function spendByEndUser(
  db: DbClient,
  tenantId: string,
  period: Period = lastDays(DEFAULT_PERIOD_DAYS),
  limit = END_USERS_SHOWN,
): Promise<EndUsersSpend> {
  const { rows } = await db.query(
    `select l.end_user, count(*)::int as requests, sum(l.amount_micros)::bigint as micros, count(*) over ()::int as groups
       from ledger l where ${SPEND}
      group by l.end_user order by micros desc, l.end_user nulls first limit $5`,
    [...periodArgs(tenantId, period), limit],
  );
  return { rows: rows.map(({ groups: _, ...r }) => r), groups: rows[0]?.groups ?? 0 };
}

/** How many end users the dashboard lists (the rest are summed in one row). */
export const END_USERS_SHOWN = 20;

export interface LedgerRow {
  id: bigint;
  kind: 'credit' | 'debit';
  amount_micros: bigint;
  balance_after_micros: bigint;
  source: string;
  key_id: string | null;
  key_label: string | null;
  model: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  estimated: boolean;
  note: string | null;
  created_at: Date;
}

export const LEDGER_PAGE_SIZE = 25;

/** Newest first; page is 1-based. */
export async function ledgerPage(db: DbClient, tenantId: string, page: number, size = LEDGER_PAGE_SIZE): Promise<{ rows: LedgerRow[]; hasMore: boolean }> {
  const { rows } = await db.query(
    `select l.id, l.kind, l.amount_micros, l.balance_after_micros, l.source, l.key_id, k.label as key_label, l.model,
            l.input_tokens, l.output_tokens, l.estimated, l.note, l.created_at
       from ledger l left join api_keys k on k.id = l.key_id and k.tenant_id = l.tenant_id
      where l.tenant_id = $1 order by l.id desc limit $2 offset $3`,
    [tenantId, size + 1, (Math.max(1, page) - 1) * size],
  );
  return { rows: rows.slice(0, size), hasMore: rows.length > size };
}
