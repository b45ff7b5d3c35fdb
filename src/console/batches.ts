import type { DbClient } from '../db/pool.ts';

// Batches across tenants (issue 30), for the console's "Lotes" page: OpenAI's Batch API and
// Anthropic's Message Batches (one table, `batches`), newest first, with each batch's tenant, lines
// and spend (the ledger's debits naming the batch, ledger.batch_id; the index ledger_batch_id of migration 090).

export const BATCH_STATUSES = ['validating', 'in_progress', 'finalizing', 'cancelling', 'completed', 'cancelled', 'expired', 'failed'] as const;
export const CONSOLE_BATCHES_PAGE = 50;

export interface ConsoleBatch {
  id: string;
  api: 'openai' | 'anthropic';
  endpoint: string;
  status: string;
  tenant_id: string;
  tenant_name: string;
  created_at: Date;
  total: number;
  completed: number;
  failed: number;
  /** lines debited (ledger rows naming the batch) and their sum, µBRL */
  debited_lines: number;
  spend_micros: bigint;
}

export interface BatchFilter {
  status?: string;
  tenantId?: string;
}

export async function listAllBatches(
  db: DbClient,
  f: BatchFilter,
  page: number,
  size = CONSOLE_BATCHES_PAGE,
): Promise<{ rows: ConsoleBatch[]; hasMore: boolean }> {
  const { rows } = await db.query(
    `select b.id, b.api, b.endpoint, b.status, b.tenant_id, t.name as tenant_name, b.created_at, b.total, b.completed, b.failed,
            s.n as debited_lines, s.spend as spend_micros
       from batches b join tenants t on t.id = b.tenant_id
       cross join lateral (select count(*)::int as n, coalesce(sum(l.amount_micros), 0)::bigint as spend from ledger l
                            where l.batch_id = b.id and l.tenant_id = b.tenant_id and l.kind = 'debit') s
      where ($1::text is null or b.status = $1) and ($2::text is null or b.tenant_id = $2)
      order by b.created_at desc, b.id desc limit $3 offset $4`,
    [f.status ?? null, f.tenantId ?? null, size + 1, (Math.max(1, page) - 1) * size],
  );
  return { rows: rows.slice(0, size).map((r) => ({ ...r, spend_micros: BigInt(r.spend_micros) })), hasMore: rows.length > size };
}
