import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { ApiKeyRecord } from '../db/keys.ts';
import type { Db, DbClient } from '../db/pool.ts';
import { errors } from '../errors.ts';
import { describeIssue, parseJsonObject } from '../protocols/request-body.ts';
import { admitBatch, type BatchRow, batchNotFound, cancelBatch, type InFlightLimits } from './batches.ts';
import { newFileId } from './files.ts';
import { messageResultsFile } from './message-results.ts';
import type { BatchRunner, ResultRow } from './runner.ts';

// Anthropic's Message Batches API (POST /v1/messages/batches with the requests inline, GET …/{id},
// GET …/{id}/results, POST …/{id}/cancel, DELETE …/{id}, GET /v1/messages/batches) over the core of
// OpenAI's batches: a `batches` row with api 'anthropic' and endpoint /v1/messages, its requests a
// `message_batch` file of the tenant's, its lines run by the same runner (src/batch/runner.ts) as
// requests of /v1/messages — held, dispatched and billed like them, at the batch prices — and its
// results read from batch_results in Anthropic's shape.

const CreateSchema = z
  .object({
    requests: z
      .array(
        z
          .object({
            custom_id: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'custom_id is 1 to 64 letters, digits, _ or -'),
            params: z.record(z.string(), z.unknown()),
          })
          .strict(),
      )
      .min(1),
  })
  .strict();

export function newMessageBatchId(now = Date.now()): string {
  return `msgbatch_${now.toString(16).padStart(12, '0')}${randomBytes(6).toString('hex')}`;
}

interface Counts {
  succeeded: number;
  errored: number;
  canceled: number;
  expired: number;
  ended: number;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const ENDED = ['completed', 'cancelled', 'expired', 'failed'];

async function countsOf(db: DbClient, id: string): Promise<Counts> {
  const { rows } = await db.query<Counts>(
    `select count(*) filter (where ok)::int as succeeded,
            count(*) filter (where ok = false and coalesce(error->>'code', '') not in ('batch_cancelled', 'batch_expired'))::int as errored,
            count(*) filter (where error->>'code' = 'batch_cancelled')::int as canceled,
            count(*) filter (where error->>'code' = 'batch_expired')::int as expired,
            count(*) filter (where ok is not null)::int as ended
       from batch_results where batch_id = $1`,
    [id],
  );
  return rows[0];
}

/** The Message Batch object. */
export async function messageBatchObject(db: DbClient, b: BatchRow) {
  const c = await countsOf(db, b.id);
  const ended = ENDED.includes(b.status);
  const endedAt = b.completed_at ?? b.cancelled_at ?? b.expired_at ?? (ended ? b.finalizing_at : null);
  return {
    id: b.id,
    type: 'message_batch' as const,
    processing_status: ended ? ('ended' as const) : b.status === 'cancelling' ? ('canceling' as const) : ('in_progress' as const),
    request_counts: { processing: b.total - c.ended, succeeded: c.succeeded, errored: c.errored, canceled: c.canceled, expired: c.expired },
    ended_at: iso(endedAt),
    created_at: iso(b.created_at),
    expires_at: iso(b.expires_at),
    archived_at: null,
    cancel_initiated_at: iso(b.cancelling_at),
    results_url: ended ? `/v1/messages/batches/${b.id}/results` : null,
  };
}

async function loadMessageBatch(db: DbClient, key: ApiKeyRecord, id: string): Promise<BatchRow> {
  const { rows } = await db.query<BatchRow>("select * from batches where id = $1 and tenant_id = $2 and api = 'anthropic'", [id, key.tenant_id]);
  if (!rows[0]) throw batchNotFound(id);
  return rows[0];
}

/** POST /v1/messages/batches: the requests kept as a file, the batch stored and its lines queued. */
export async function createMessageBatch(
  db: Db,
  runner: BatchRunner,
  key: ApiKeyRecord,
  rawBody: Buffer,
  limits: { maxLines: number; retentionDays: number; inFlight: InFlightLimits },
) {
  const parsed = CreateSchema.safeParse(parseJsonObject(rawBody));
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { requests } = parsed.data;
  if (requests.length > limits.maxLines) throw errors.badRequest(`A message batch holds at most ${limits.maxLines} requests.`, 'requests', 'too_many_lines');
  const seen = new Set<string>();
  for (const r of requests) {
    if (seen.has(r.custom_id)) throw errors.badRequest(`custom_id '${r.custom_id}' is not unique in this batch.`, 'requests');
    seen.add(r.custom_id);
  }
  const content = Buffer.from(
    `${requests.map((r) => JSON.stringify({ custom_id: r.custom_id, method: 'POST', url: '/v1/messages', body: r.params })).join('\n')}\n`,
  );
  const fileId = newFileId();
  const client = await db.connect();
  let row: BatchRow;
  try {
    await client.query('begin');
    await admitBatch(client, key.tenant_id, requests.length, limits.inFlight);
    await client.query(
      `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at)
       values ($1, $2, $3, 'message_batch', 'requests.jsonl', $4, $5, $6, now() + make_interval(days => $7::int))`,
      [fileId, key.tenant_id, key.id, content.byteLength, requests.length, content, limits.retentionDays],
    );
    const { rows } = await client.query<BatchRow>(
      `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, expires_at, api)
       values ($1, $2, $3, $4, '/v1/messages', '24h', 'validating', $5, now() + interval '24 hours', 'anthropic') returning *`,
      [newMessageBatchId(), key.tenant_id, key.id, fileId, requests.length],
    );
    row = rows[0];
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
  // vendor mode (src/batch/vendor.ts): a model whose Anthropic deployment takes vendor batches
  const vendor = await runner.vendor.tryStart(
    key,
    row,
    requests.map((r) => ({ custom_id: r.custom_id, method: 'POST' as const, url: '/v1/messages' as const, body: r.params })),
  );
  return messageBatchObject(db, vendor ?? (await runner.enqueue(row, requests.length)));
}

export async function getMessageBatchBody(db: DbClient, key: ApiKeyRecord, id: string) {
  return messageBatchObject(db, await loadMessageBatch(db, key, id));
}

/** POST …/cancel: `canceling`; the requests not yet run end `canceled`. */
export async function cancelMessageBatch(db: DbClient, runner: BatchRunner, key: ApiKeyRecord, id: string) {
  const row = await cancelBatch(db, key, id, 'anthropic');
  await runner.vendor.cancelled(row);
  return messageBatchObject(db, (await runner.finalizeIfDone(id)) ?? row);
}

/** DELETE …/{id}: an ended batch, its results and its requests removed; one still processing is a 400. */
export async function deleteMessageBatch(db: DbClient, key: ApiKeyRecord, id: string) {
  const b = await loadMessageBatch(db, key, id);
  if (!ENDED.includes(b.status)) throw errors.badRequest(`Batch ${id} is still processing; cancel it first.`, 'id', 'batch_not_ended');
  await db.query('delete from batch_results where batch_id = $1', [id]);
  await db.query('delete from batches where id = $1', [id]);
  await db.query("delete from batch_files where id = $1 and purpose = 'message_batch'", [b.input_file_id]);
  return { id, type: 'message_batch_deleted' as const };
}

const ListQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(1000).default(20),
  after_id: z.string().min(1).optional(),
  before_id: z.string().min(1).optional(),
});

/** GET /v1/messages/batches: newest first; `after_id` pages to older batches, `before_id` to newer. */
export async function listMessageBatchesBody(db: DbClient, key: ApiKeyRecord, query: URLSearchParams) {
  const parsed = ListQuerySchema.safeParse({
    limit: query.get('limit') ?? undefined,
    after_id: query.get('after_id') ?? undefined,
    before_id: query.get('before_id') ?? undefined,
  });
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { limit, after_id, before_id } = parsed.data;
  const { rows } = before_id
    ? await db.query<BatchRow>(
        "select * from (select * from batches where tenant_id = $1 and api = 'anthropic' and id > $2 order by id asc limit $3) b order by id desc",
        [key.tenant_id, before_id, limit + 1],
      )
    : await db.query<BatchRow>("select * from batches where tenant_id = $1 and api = 'anthropic' and ($2::text is null or id < $2) order by id desc limit $3", [
        key.tenant_id,
        after_id ?? null,
        limit + 1,
      ]);
  const page = before_id ? rows.slice(Math.max(0, rows.length - limit)) : rows.slice(0, limit);
  const data = await Promise.all(page.map((b) => messageBatchObject(db, b)));
  return { data, has_more: rows.length > limit, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null };
}

/** GET …/results: one JSONL line a request, in the order given; 400 while the batch is processing. */
export async function messageBatchResults(db: DbClient, key: ApiKeyRecord, id: string): Promise<Buffer> {
  const b = await loadMessageBatch(db, key, id);
  if (!ENDED.includes(b.status)) throw errors.badRequest(`Batch ${id} is still processing; its results are not ready.`, 'id', 'batch_not_ended');
  const { rows } = await db.query<ResultRow>('select * from batch_results where batch_id = $1 order by line', [id]);
  return messageResultsFile(rows);
}
