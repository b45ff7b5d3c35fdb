import type { DbClient } from '../db/pool.ts';
import { messageResultsFile } from '../batch/message-results.ts';

// The portal's "Lotes" page (issue 30): a tenant's batches — OpenAI's Batch API and Anthropic's
// Message Batches, one table (`batches`, migrations 081 and 083) — newest first, with what their
// lines cost (the ledger's debits naming the batch, migration 084), and their result files.
// Every query is scoped by the tenant: another tenant's batch does not exist here.

export const BATCHES_PAGE_SIZE = 20;

export interface PortalBatch {
  id: string;
  api: 'openai' | 'anthropic';
  endpoint: string;
  status: string;
  created_at: Date;
  /** when it ended: completed, cancelled, expired (or failed), null while it runs */
  ended_at: Date | null;
  total: number;
  completed: number;
  failed: number;
  /** Σ of the ledger's debits naming the batch (µBRL) */
  spend_micros: bigint;
  /** OpenAI's output / error file, when written and not expired */
  output_file_id: string | null;
  error_file_id: string | null;
  /** Anthropic's: the results can be read (the batch ended) */
  results: boolean;
}

const ENDED = `('completed', 'cancelled', 'expired', 'failed')`;

export async function listBatches(db: DbClient, tenantId: string, page: number, size = BATCHES_PAGE_SIZE): Promise<{ rows: PortalBatch[]; hasMore: boolean }> {
  const { rows } = await db.query(
    `select b.id, b.api, b.endpoint, b.status, b.created_at,
            case when b.status in ${ENDED} then coalesce(b.completed_at, b.cancelled_at, b.expired_at, b.finalizing_at) end as ended_at,
            b.total, b.completed, b.failed,
            (select coalesce(sum(l.amount_micros), 0) from ledger l
              where l.batch_id = b.id and l.tenant_id = b.tenant_id and l.kind = 'debit')::bigint as spend_micros,
            (select f.id from batch_files f where f.id = b.output_file_id and f.tenant_id = b.tenant_id and f.expires_at > now()) as output_file_id,
            (select f.id from batch_files f where f.id = b.error_file_id and f.tenant_id = b.tenant_id and f.expires_at > now()) as error_file_id,
            (b.api = 'anthropic' and b.status in ${ENDED}) as results
       from batches b
      where b.tenant_id = $1
      order by b.created_at desc, b.id desc limit $2 offset $3`,
    [tenantId, size + 1, (Math.max(1, page) - 1) * size],
  );
  return { rows: rows.slice(0, size).map((r) => ({ ...r, spend_micros: BigInt(r.spend_micros) })), hasMore: rows.length > size };
}

export type BatchFileKind = 'output' | 'errors' | 'results';

/**
 * The bytes of one of a batch's files, as the API serves them: OpenAI's output or error file
 * (`GET /v1/files/{id}/content`), Anthropic's results (`GET /v1/messages/batches/{id}/results`).
 * Null when the tenant has no such batch, the batch has no such file (not written, expired, not
 * ended yet), or the kind is not its API's.
 */
export async function batchFile(db: DbClient, tenantId: string, batchId: string, kind: BatchFileKind): Promise<{ filename: string; content: Buffer } | null> {
  const { rows } = await db.query('select id, api, status, output_file_id, error_file_id from batches where id = $1 and tenant_id = $2', [batchId, tenantId]);
  const b = rows[0];
  if (!b) return null;
  if (kind === 'results') {
    if (b.api !== 'anthropic' || !['completed', 'cancelled', 'expired', 'failed'].includes(b.status)) return null;
    const results = await db.query('select custom_id, body, error, ok from batch_results where batch_id = $1 order by line', [batchId]);
    return { filename: `${batchId}_results.jsonl`, content: messageResultsFile(results.rows) };
  }
  const fileId = b.api === 'openai' ? (kind === 'output' ? b.output_file_id : b.error_file_id) : null;
  if (!fileId) return null;
  const f = await db.query('select content from batch_files where id = $1 and tenant_id = $2 and expires_at > now()', [fileId, tenantId]);
  return f.rows[0] ? { filename: `${batchId}_${kind}.jsonl`, content: f.rows[0].content } : null;
}
