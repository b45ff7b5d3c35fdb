import { type BatchRow, cancelBatch } from '../batch/batches.ts';
import { messageResultsFile } from '../batch/message-results.ts';
import type { DbClient } from '../db/pool.ts';
import { CatracaError } from '../errors.ts';

// The portal's "Lotes" page (issue 30): a tenant's batches — OpenAI's Batch API and Anthropic's
// Message Batches, one table (`batches`, migrations 081 and 083) — newest first, with what their
// lines cost (the ledger's debits naming the batch, migration 084), and their result files.
// Every query is scoped by the tenant: another tenant's batch does not exist here. A batch still
// running may be cancelled from here (cancelPortalBatch): the API's own cancel (src/batch/batches.ts).

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
  /** the batch's input file (OpenAI's, or the requests of an Anthropic batch), when not deleted nor expired */
  input_file_id: string | null;
  /** OpenAI's output / error file, when written and not expired */
  output_file_id: string | null;
  error_file_id: string | null;
  /** Anthropic's: the results can be read (the batch ended) */
  results: boolean;
  /** it may be cancelled: `validating` or `in_progress` (the API's cancel refuses any other) */
  cancellable: boolean;
}

const ENDED = `('completed', 'cancelled', 'expired', 'failed')`;

const CANCELLABLE = `('validating', 'in_progress')`;

const PORTAL_BATCH = `select b.id, b.api, b.endpoint, b.status, b.created_at,
            case when b.status in ${ENDED} then coalesce(b.completed_at, b.cancelled_at, b.expired_at, b.finalizing_at) end as ended_at,
            b.total, b.completed, b.failed,
            (select coalesce(sum(l.amount_micros), 0) from ledger l
              where l.batch_id = b.id and l.tenant_id = b.tenant_id and l.kind = 'debit')::bigint as spend_micros,
            (select f.id from batch_files f where f.id = b.input_file_id and f.tenant_id = b.tenant_id and f.expires_at > now()) as input_file_id,
            (select f.id from batch_files f where f.id = b.output_file_id and f.tenant_id = b.tenant_id and f.expires_at > now()) as output_file_id,
            (select f.id from batch_files f where f.id = b.error_file_id and f.tenant_id = b.tenant_id and f.expires_at > now()) as error_file_id,
            (b.api = 'anthropic' and b.status in ${ENDED}) as results,
            b.status in ${CANCELLABLE} as cancellable
       from batches b`;

const portalBatch = (r: PortalBatch & { spend_micros: string | bigint }): PortalBatch => ({ ...r, spend_micros: BigInt(r.spend_micros) });

export async function listBatches(db: DbClient, tenantId: string, page: number, size = BATCHES_PAGE_SIZE): Promise<{ rows: PortalBatch[]; hasMore: boolean }> {
  const { rows } = await db.query(`${PORTAL_BATCH} where b.tenant_id = $1 order by b.created_at desc, b.id desc limit $2 offset $3`, [
    tenantId,
    size + 1,
    (Math.max(1, page) - 1) * size,
  ]);
  return { rows: rows.slice(0, size).map(portalBatch), hasMore: rows.length > size };
}

/** One batch of the tenant's, as the page lists it (null: the tenant has no such batch). */
export async function getBatch(db: DbClient, tenantId: string, batchId: string): Promise<PortalBatch | null> {
  const { rows } = await db.query(`${PORTAL_BATCH} where b.id = $1 and b.tenant_id = $2`, [batchId, tenantId]);
  return rows[0] ? portalBatch(rows[0]) : null;
}

/**
 * "Cancelar": the API's cancel (POST /v1/batches/{id}/cancel, …/messages/batches/{id}/cancel), the
 * same statement: the batch `cancelling`, and the front doors end it — their runners end a queue-mode
 * batch's lines not started and the batch `cancelled` once no line is left running; their vendor loop
 * sees a vendor-mode batch `cancelling` at its next poll (BATCH_VENDOR_POLL_MS) and tells the vendor.
 * `not_cancellable` (with the status) for a batch that already ended; null when the tenant has no such batch.
 */
export async function cancelPortalBatch(
  db: DbClient,
  tenantId: string,
  batchId: string,
): Promise<{ cancelled: BatchRow } | { notCancellable: BatchRow['status'] } | null> {
  const { rows } = await db.query<{ api: BatchRow['api'] }>('select api from batches where id = $1 and tenant_id = $2', [batchId, tenantId]);
  if (!rows[0]) return null;
  try {
    return { cancelled: await cancelBatch(db, { tenant_id: tenantId }, batchId, rows[0].api) };
  } catch (err) {
    if (!(err instanceof CatracaError) || err.code !== 'batch_not_cancellable') throw err;
    const { rows: now } = await db.query<{ status: BatchRow['status'] }>('select status from batches where id = $1 and tenant_id = $2', [batchId, tenantId]);
    return now[0] ? { notCancellable: now[0].status } : null;
  }
}

export type BatchFileKind = 'input' | 'output' | 'errors' | 'results';

/**
 * The bytes of one of a batch's files, as the API serves them: OpenAI's input, output or error file
 * (`GET /v1/files/{id}/content`), Anthropic's results (`GET /v1/messages/batches/{id}/results`); an
 * Anthropic batch's input is its requests as they were sent, one `{custom_id, params}` a line.
 * Null when the tenant has no such batch, the batch has no such file (not written, expired, not
 * ended yet), or the kind is not its API's.
 */
export async function batchFile(db: DbClient, tenantId: string, batchId: string, kind: BatchFileKind): Promise<{ filename: string; content: Buffer } | null> {
  const { rows } = await db.query('select id, api, status, input_file_id, output_file_id, error_file_id from batches where id = $1 and tenant_id = $2', [
    batchId,
    tenantId,
  ]);
  const b = rows[0];
  if (!b) return null;
  if (kind === 'results') {
    if (b.api !== 'anthropic' || !['completed', 'cancelled', 'expired', 'failed'].includes(b.status)) return null;
    const results = await db.query('select custom_id, body, error, ok from batch_results where batch_id = $1 order by line', [batchId]);
    return { filename: `${batchId}_results.jsonl`, content: messageResultsFile(results.rows) };
  }
  const fileId = kind === 'input' ? b.input_file_id : b.api === 'openai' ? (kind === 'output' ? b.output_file_id : b.error_file_id) : null;
  if (!fileId) return null;
  const f = await db.query('select content from batch_files where id = $1 and tenant_id = $2 and expires_at > now()', [fileId, tenantId]);
  if (!f.rows[0]) return null;
  const content = kind === 'input' && b.api === 'anthropic' ? messageRequestsFile(f.rows[0].content) : f.rows[0].content;
  return { filename: `${batchId}_${kind}.jsonl`, content };
}

/** An Anthropic batch's requests as sent (`{custom_id, params}`), from the lines they are kept as (`{custom_id, method, url, body}`). */
function messageRequestsFile(stored: Buffer): Buffer {
  const lines = stored
    .toString('utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => {
      const { custom_id, body } = JSON.parse(l) as { custom_id: string; body: unknown };
      return JSON.stringify({ custom_id, params: body });
    });
  return Buffer.from(lines.length ? `${lines.join('\n')}\n` : '');
}
