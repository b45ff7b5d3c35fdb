import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { ApiKeyRecord } from '../db/keys.ts';
import { type Db, type DbClient, withTransaction } from '../db/pool.ts';
import { CatracaError, errors } from '../errors.ts';
import { describeIssue, parseJsonObject } from '../protocols/request-body.ts';
import { BATCH_ENDPOINTS, type BatchLine, fileNotFound, parseBatchFile } from './files.ts';

// OpenAI's Batch API (POST /v1/batches, GET /v1/batches/{id}, POST …/cancel, GET /v1/batches) in
// `queue` mode: the batch's rows and its lines' results in PostgreSQL (migration 081), the lines on
// the JetStream work queue BATCH (src/batch/runner.ts). Another tenant's batch is not found.

export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

export interface BatchRow {
  id: string;
  tenant_id: string;
  key_id: string;
  input_file_id: string;
  endpoint: string;
  completion_window: string;
  metadata: Record<string, string> | null;
  status: BatchStatus;
  /** whose API made it: OpenAI's Batch API or Anthropic's Message Batches */
  api: 'openai' | 'anthropic';
  total: number;
  completed: number;
  failed: number;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: Date;
  in_progress_at: Date | null;
  finalizing_at: Date | null;
  completed_at: Date | null;
  cancelling_at: Date | null;
  cancelled_at: Date | null;
  expired_at: Date | null;
  expires_at: Date;
  /** the model every line names; null when they differ */
  model: string | null;
  /** output_expires_after.seconds: how long the output and error files are kept (null: BATCH_RETENTION_DAYS) */
  output_expires_seconds: number | null;
  /** when a line was first refused 402 for the tenant's balance: the lines not started then were not run (migration 087) */
  out_of_balance_at: Date | null;
  out_of_balance_line: number | null;
}

/** OpenAI's Batch `usage`: the tokens of the lines billed so far, from their ledger debits. */
export interface BatchUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

const NO_USAGE: BatchUsage = {
  input_tokens: 0,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 0,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 0,
};

/** The usage of each batch, summed over its lines' debits (ledger.batch_id, index ledger_batch_id). */
export async function batchUsage(db: DbClient, tenantId: string, ids: string[]): Promise<Map<string, BatchUsage>> {
  const out = new Map<string, BatchUsage>();
  if (ids.length === 0) return out;
  const { rows } = await db.query<{ batch_id: string; input: string; cached: string; output: string; reasoning: string }>(
    `select batch_id, coalesce(sum(input_tokens), 0)::text as input, coalesce(sum(cached_tokens), 0)::text as cached,
            coalesce(sum(output_tokens), 0)::text as output, coalesce(sum(reasoning_tokens), 0)::text as reasoning
       from ledger where batch_id = any($1) and tenant_id = $2 and kind = 'debit' group by batch_id`,
    [ids, tenantId],
  );
  for (const r of rows) {
    const input = Number(r.input);
    const output = Number(r.output);
    out.set(r.batch_id, {
      input_tokens: input,
      input_tokens_details: { cached_tokens: Number(r.cached) },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: Number(r.reasoning) },
      total_tokens: input + output,
    });
  }
  return out;
}

export const batchNotFound = (id: string) => new CatracaError(404, 'invalid_request_error', 'batch_not_found', `No batch found with id '${id}'.`, 'id');

const seconds = (d: Date | null) => (d ? Math.floor(d.getTime() / 1000) : null);

export function newBatchId(now = Date.now()): string {
  return `batch_${now.toString(16).padStart(12, '0')}${randomBytes(6).toString('hex')}`;
}

export function batchObject(b: BatchRow, usage: BatchUsage = NO_USAGE) {
  return {
    id: b.id,
    object: 'batch' as const,
    endpoint: b.endpoint,
    model: b.model ?? null,
    errors: null,
    input_file_id: b.input_file_id,
    completion_window: b.completion_window,
    status: b.status,
    output_file_id: b.output_file_id,
    error_file_id: b.error_file_id,
    created_at: seconds(b.created_at),
    in_progress_at: seconds(b.in_progress_at),
    expires_at: seconds(b.expires_at),
    finalizing_at: seconds(b.finalizing_at),
    completed_at: seconds(b.completed_at),
    failed_at: null,
    expired_at: seconds(b.expired_at),
    cancelling_at: seconds(b.cancelling_at),
    cancelled_at: seconds(b.cancelled_at),
    request_counts: { total: b.total, completed: b.completed, failed: b.failed },
    usage,
    metadata: b.metadata,
  };
}

const CreateSchema = z
  .object({
    input_file_id: z.string().min(1),
    endpoint: z.enum(BATCH_ENDPOINTS),
    completion_window: z.literal('24h'),
    metadata: z
      .record(z.string().max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 16, 'metadata holds at most 16 pairs')
      .nullish(),
    output_expires_after: z
      .object({ anchor: z.literal('created_at'), seconds: z.number().int().min(3600).max(2592000) })
      .strict()
      .nullish(),
  })
  .strict();

/** The per-tenant caps on unfinished batches (BATCH_MAX_IN_FLIGHT) and on their request lines not ended yet, all together (BATCH_MAX_LINES_IN_FLIGHT). */
export interface InFlightLimits {
  maxBatches: number;
  maxLines: number;
}

export const IN_FLIGHT = "('validating', 'in_progress', 'finalizing', 'cancelling')";

/**
 * In the transaction that inserts a tenant's new batch of `lines` lines: its unfinished batches (both
 * APIs') counted under a lock of the tenant's, so that two batches created at once cannot both pass
 * the cap; one more than BATCH_MAX_IN_FLIGHT, or lines past BATCH_MAX_LINES_IN_FLIGHT, is a 429.
 * A batch's lines in flight are those not ended yet: its `total` less the lines counted in
 * `completed` and `failed`, less the lines ended not run (`batch_cancelled`, `batch_expired`: no
 * status code, counted in neither). Lines not run exist only once a batch is `cancelling` or past
 * its window, so only those batches' results are counted.
 */
export async function admitBatch(client: DbClient, tenantId: string, lines: number, limits: InFlightLimits): Promise<void> {
  await client.query("select pg_advisory_xact_lock(hashtext('catraca.batches'), hashtext($1))", [tenantId]);
  const { rows } = await client.query<{ batches: number; lines: string }>(
    `select count(*)::int as batches,
            coalesce(sum(b.total - b.completed - b.failed
              - case when b.status = 'cancelling' or b.expires_at <= now() then
                  (select count(*) from batch_results r
                    where r.batch_id = b.id and r.ok = false and r.status_code is null and r.error->>'code' in ('batch_cancelled', 'batch_expired'))
                else 0 end), 0)::text as lines
       from batches b where b.tenant_id = $1 and b.status in ${IN_FLIGHT}`,
    [tenantId],
  );
  const { batches, lines: pending } = { batches: rows[0].batches, lines: Number(rows[0].lines) };
  if (batches >= limits.maxBatches) {
    throw new CatracaError(
      429,
      'rate_limit_error',
      'batch_limit_exceeded',
      `You have ${batches} batches in progress, the most a tenant may have at once (BATCH_MAX_IN_FLIGHT = ${limits.maxBatches}). Wait for one to end, or cancel one, then try again.`,
    );
  }
  if (pending + lines > limits.maxLines) {
    throw new CatracaError(
      429,
      'rate_limit_error',
      'batch_limit_exceeded',
      `Your batches in progress hold ${pending} requests not ended yet; this batch's ${lines} would pass the most a tenant may have in progress at once (BATCH_MAX_LINES_IN_FLIGHT = ${limits.maxLines}). Wait for a batch to end, or cancel one, then try again.`,
    );
  }
}

/** What the runner needs of a new batch: its row and its lines, to be queued. */
export interface CreatedBatch {
  row: BatchRow;
  lines: BatchLine[];
}

/**
 * POST /v1/batches: the input file (the tenant's, purpose `batch`) read and every line's url checked
 * against `endpoint` (400 naming the first line that differs); the batch stored as `validating`.
 * The caller queues its lines and moves it to `in_progress`.
 */
export async function insertBatch(db: Db, key: ApiKeyRecord, rawBody: Buffer, maxLines: number, limits: InFlightLimits): Promise<CreatedBatch> {
  const parsed = CreateSchema.safeParse(parseJsonObject(rawBody));
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { input_file_id, endpoint, completion_window, metadata, output_expires_after } = parsed.data;
  const { rows: files } = await db.query<{ content: Buffer }>(
    "select content from batch_files where id = $1 and tenant_id = $2 and purpose = 'batch' and expires_at > now()",
    [input_file_id, key.tenant_id],
  );
  if (!files[0]) {
    const e = fileNotFound(input_file_id);
    throw new CatracaError(e.status, e.type, e.code, e.message, 'input_file_id');
  }
  const lines = parseBatchFile(files[0].content, maxLines);
  const other = lines.findIndex((l) => l.url !== endpoint);
  if (other >= 0) {
    throw errors.badRequest(
      `The input file's request ${other + 1} (custom_id '${lines[other].custom_id}') is for ${lines[other].url}, not the batch's endpoint ${endpoint}.`,
      'input_file_id',
      'mismatched_endpoint',
    );
  }
  const models = new Set(lines.map((l) => (typeof l.body.model === 'string' ? l.body.model : null)));
  const model = models.size === 1 ? [...models][0]! : null;
  const row = await withTransaction(db, async (client) => {
    await admitBatch(client, key.tenant_id, lines.length, limits);
    const { rows } = await client.query<BatchRow>(
      `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, metadata, status, total, expires_at, model, output_expires_seconds)
       values ($1, $2, $3, $4, $5, $6, $7, 'validating', $8, now() + interval '24 hours', $9, $10) returning *`,
      [
        newBatchId(),
        key.tenant_id,
        key.id,
        input_file_id,
        endpoint,
        completion_window,
        metadata ?? null,
        lines.length,
        model,
        output_expires_after?.seconds ?? null,
      ],
    );
    return rows[0];
  });
  return { row, lines };
}

export async function loadBatch(db: DbClient, tenantId: string, id: string, api: BatchRow['api'] = 'openai'): Promise<BatchRow | null> {
  const { rows } = await db.query<BatchRow>('select * from batches where id = $1 and tenant_id = $2 and api = $3', [id, tenantId, api]);
  return rows[0] ?? null;
}

export async function getBatchBody(db: DbClient, key: ApiKeyRecord, id: string) {
  const b = await loadBatch(db, key.tenant_id, id);
  if (!b) throw batchNotFound(id);
  return batchObject(b, (await batchUsage(db, key.tenant_id, [b.id])).get(b.id));
}

/**
 * POST /v1/batches/{id}/cancel: an unfinished batch becomes `cancelling` (lines running end, lines
 * not started are not run); the runner ends it `cancelled`. Cancelling a batch already ended is a 400.
 * The portal's "Cancelar" is this same statement, for the tenant of the signed-in member.
 */
export async function cancelBatch(db: DbClient, key: Pick<ApiKeyRecord, 'tenant_id'>, id: string, api: BatchRow['api'] = 'openai'): Promise<BatchRow> {
  const { rows } = await db.query<BatchRow>(
    `update batches set status = 'cancelling', cancelling_at = now()
      where id = $1 and tenant_id = $2 and api = $3 and status in ('validating', 'in_progress') returning *`,
    [id, key.tenant_id, api],
  );
  if (rows[0]) return rows[0];
  const b = await loadBatch(db, key.tenant_id, id, api);
  if (!b) throw batchNotFound(id);
  if (b.status === 'cancelling') return b;
  throw errors.badRequest(`Cannot cancel a batch with status '${b.status}'.`, 'id', 'batch_not_cancellable');
}

const ListQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().min(1).optional(),
});

/** GET /v1/batches: the tenant's batches, newest first, a page after the cursor `after` (a batch id). */
export async function listBatchesBody(db: DbClient, key: ApiKeyRecord, query: URLSearchParams) {
  const parsed = ListQuerySchema.safeParse({ limit: query.get('limit') ?? undefined, after: query.get('after') ?? undefined });
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { limit, after } = parsed.data;
  const { rows } = await db.query<BatchRow>(
    "select * from batches where tenant_id = $1 and api = 'openai' and ($2::text is null or id < $2) order by id desc limit $3",
    [key.tenant_id, after ?? null, limit + 1],
  );
  const page = rows.slice(0, limit);
  const usage = await batchUsage(
    db,
    key.tenant_id,
    page.map((b) => b.id),
  );
  const data = page.map((b) => batchObject(b, usage.get(b.id)));
  return { object: 'list' as const, data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: rows.length > limit };
}
