import type { DbClient } from '../db/pool.ts';

// Read models of the portal's usage pages. Every query is scoped by tenant.

export async function dailySpend(db: DbClient, tenantId: string, days = 30): Promise<Array<{ day: string; micros: bigint; requests: number }>> {
  const { rows } = await db.query(
    `with d as (
       select generate_series((now() at time zone 'UTC')::date - ($2::int - 1), (now() at time zone 'UTC')::date, interval '1 day')::date as day)
     select to_char(d.day, 'YYYY-MM-DD') as day,
            coalesce(sum(l.amount_micros), 0)::bigint as micros,
            count(l.id)::int as requests
       from d left join ledger l
         on l.tenant_id = $1 and l.kind = 'debit' and l.source = 'request'
        and (l.created_at at time zone 'UTC')::date = d.day
      group by d.day order by d.day`,
    [tenantId, days],
  );
  return rows;
}

export async function spendByModel(db: DbClient, tenantId: string, days = 30) {
  const { rows } = await db.query(
    `select model, count(*)::int as requests, coalesce(sum(input_tokens), 0)::bigint as input_tokens,
            coalesce(sum(output_tokens), 0)::bigint as output_tokens, sum(amount_micros)::bigint as micros
       from ledger where tenant_id = $1 and kind = 'debit' and source = 'request' and created_at > now() - make_interval(days => $2)
      group by model order by micros desc, model`,
    [tenantId, days],
  );
  return rows as Array<{ model: string; requests: number; input_tokens: bigint; output_tokens: bigint; micros: bigint }>;
}

export async function spendByKey(db: DbClient, tenantId: string, days = 30) {
  const { rows } = await db.query(
    `select l.key_id, k.label, k.key_hint, count(*)::int as requests, sum(l.amount_micros)::bigint as micros
       from ledger l left join api_keys k on k.id = l.key_id and k.tenant_id = l.tenant_id
      where l.tenant_id = $1 and l.kind = 'debit' and l.source = 'request' and l.created_at > now() - make_interval(days => $2)
      group by l.key_id, k.label, k.key_hint order by micros desc, l.key_id`,
    [tenantId, days],
  );
  return rows as Array<{ key_id: string; label: string | null; key_hint: string | null; requests: number; micros: bigint }>;
}

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
