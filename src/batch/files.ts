import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { ApiKeyRecord } from '../db/keys.ts';
import type { DbClient } from '../db/pool.ts';
import { CatracaError, errors } from '../errors.ts';
import { describeIssue } from '../protocols/request-body.ts';

// OpenAI's Files API for batches (POST/GET /v1/files, GET/DELETE /v1/files/{id}, GET …/content),
// stored in PostgreSQL per tenant (table batch_files, docs/batch.md): another tenant's file is not
// found, like a missing one. A `batch` file is JSONL whose every line is one request —
// {custom_id, method: "POST", url, body} — checked at upload, so a batch never starts on a file it
// cannot read; the body itself is checked line by line when the batch runs (a bad body is an error
// line there, never a failed upload).

/** The endpoints a batch line may name (OpenAI's Batch API's, all served by catraca). */
export const BATCH_ENDPOINTS = ['/v1/chat/completions', '/v1/embeddings', '/v1/completions', '/v1/responses'] as const;

export interface FileLimits {
  /** largest upload (the multipart body), bytes */
  maxBytes: number;
  /** most request lines in one file */
  maxLines: number;
  /** days a file is kept (BATCH_RETENTION_DAYS) */
  retentionDays: number;
}

export interface StoredFile {
  id: string;
  purpose: string;
  filename: string;
  bytes: number;
  lines: number;
  created_at: Date;
  expires_at: Date;
}

export const fileNotFound = (id: string) => new CatracaError(404, 'invalid_request_error', 'file_not_found', `No such File object: ${id}`, 'id');

/** A new file id: the creation time first, so ids sort as files were created (the list's cursor). */
export function newFileId(now = Date.now()): string {
  return `file-${now.toString(16).padStart(12, '0')}${randomBytes(6).toString('hex')}`;
}

export function fileObject(f: StoredFile) {
  return {
    id: f.id,
    object: 'file' as const,
    bytes: f.bytes,
    created_at: Math.floor(f.created_at.getTime() / 1000),
    expires_at: Math.floor(f.expires_at.getTime() / 1000),
    filename: f.filename,
    purpose: f.purpose,
    status: 'processed' as const,
    status_details: null,
  };
}

const lineSchema = (urls: readonly [string, ...string[]]) =>
  z
    .object({
      custom_id: z.string().min(1).max(512),
      method: z.literal('POST'),
      url: z.enum(urls),
      body: z.record(z.string(), z.unknown()),
    })
    .strict();
const LineSchema = lineSchema(BATCH_ENDPOINTS);

export interface BatchLine {
  custom_id: string;
  method: 'POST';
  url: string;
  body: Record<string, unknown>;
}

const badFile = (message: string, code = 'invalid_file') => errors.badRequest(message, 'file', code);

/**
 * The request lines of a `batch` file, or a 400 naming the first line at fault (1-based): not UTF-8,
 * not a JSON object, a field missing or wrong, a custom_id seen before, more than `maxLines` lines.
 * Blank lines (a trailing newline, CRLF) are skipped.
 */
/** The lines the runner reads: a batch file's, or the inline requests of an Anthropic message batch (url /v1/messages). */
export const RunnableLineSchema = lineSchema([...BATCH_ENDPOINTS, '/v1/messages']);

export function parseBatchFile(content: Buffer, maxLines: number, schema: z.ZodType<BatchLine> = LineSchema): BatchLine[] {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(content);
  } catch {
    throw badFile('The file is not valid UTF-8.');
  }
  const lines: BatchLine[] = [];
  const seen = new Set<string>();
  const raw = text.split('\n');
  for (let i = 0; i < raw.length; i++) {
    const line = raw[i].trim();
    if (line === '') continue;
    const n = i + 1;
    if (lines.length === maxLines) throw badFile(`The file has more than ${maxLines} request lines (the limit of one batch).`, 'too_many_lines');
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw badFile(`Line ${n} is not valid JSON.`);
    }
    const parsed = schema.safeParse(value);
    if (!parsed.success) {
      const { message } = describeIssue(parsed.error);
      throw badFile(`Line ${n}: ${message}`);
    }
    if (seen.has(parsed.data.custom_id)) throw badFile(`Line ${n}: custom_id '${parsed.data.custom_id}' is not unique in this file.`);
    seen.add(parsed.data.custom_id);
    lines.push(parsed.data);
  }
  if (lines.length === 0) throw badFile('The file has no request lines.');
  return lines;
}

/**
 * A stored batch file as a runner reads it: the bytes and where each request line starts and ends,
 * a line parsed only when it runs. A door keeps a 50,000-line file as one buffer outside the heap,
 * not 50,000 parsed bodies the garbage collector would mark again at every major collection while
 * interactive requests wait. The file was checked whole at upload (parseBatchFile).
 */
export class BatchFileIndex {
  private readonly bounds: Uint32Array;
  readonly count: number;

  constructor(private readonly content: Buffer) {
    const bounds: number[] = [];
    for (let start = 0; start <= content.length; ) {
      let end = content.indexOf(0x0a, start);
      if (end === -1) end = content.length;
      for (let i = start; i < end; i++) {
        const b = content[i];
        if (b !== 0x20 && b !== 0x09 && b !== 0x0d) {
          bounds.push(start, end);
          break;
        }
      }
      start = end + 1;
    }
    this.bounds = Uint32Array.from(bounds);
    this.count = bounds.length / 2;
  }

  /** Request line `i` (0-based, blank lines not counted), or null past the end or when it no longer parses. */
  line(i: number): BatchLine | null {
    if (!Number.isInteger(i) || i < 0 || i >= this.count) return null;
    try {
      const parsed = RunnableLineSchema.safeParse(JSON.parse(this.content.toString('utf8', this.bounds[2 * i], this.bounds[2 * i + 1])));
      return parsed.success ? parsed.data : null;
    } catch {
      return null;
    }
  }

  /** Every line's custom_id, in order (a cancel, an expiry or a balance run out ends the lines not started at once). */
  customIds(): string[] {
    return Array.from({ length: this.count }, (_, i) => this.line(i)?.custom_id ?? `line-${i + 1}`);
  }
}

/** The upload's fields, from its multipart/form-data body (undici's parser, the one `fetch` uses). */
export async function readUpload(
  body: Buffer,
  contentType: string,
): Promise<{ purpose: string; filename: string; content: Buffer; expiresAfterSeconds: number | null }> {
  if (!/^multipart\/form-data\s*;/i.test(contentType)) {
    throw new CatracaError(415, 'invalid_request_error', 'unsupported_media_type', 'POST /v1/files takes multipart/form-data (fields "purpose" and "file").');
  }
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(body.buffer as ArrayBuffer, body.byteOffset, body.byteLength), {
      headers: { 'content-type': contentType },
    }).formData();
  } catch {
    throw errors.badRequest('The multipart/form-data body could not be read.', null, 'invalid_multipart');
  }
  const purpose = form.get('purpose');
  if (typeof purpose !== 'string') throw errors.badRequest("Missing required parameter: 'purpose'.", 'purpose');
  if (purpose !== 'batch') throw errors.badRequest(`Invalid value for 'purpose': '${purpose}'; this gateway takes files for 'batch' only.`, 'purpose');
  const file = form.get('file');
  if (file === null || typeof file === 'string') throw errors.badRequest("Missing required parameter: 'file'.", 'file');
  const filename = (file.name || 'upload.jsonl').replace(/\p{Cc}/gu, '').slice(0, 255) || 'upload.jsonl';
  return { purpose, filename, content: Buffer.from(await file.arrayBuffer()), expiresAfterSeconds: expiresAfter(form) };
}

/** OpenAI's `expires_after` (`expires_after[anchor]=created_at`, `expires_after[seconds]` 3600–2592000), as the SDK sends it in the form. */
function expiresAfter(form: FormData): number | null {
  const anchor = form.get('expires_after[anchor]');
  const seconds = form.get('expires_after[seconds]');
  if (anchor === null && seconds === null) return null;
  if (anchor !== 'created_at') throw errors.badRequest("Invalid value for 'expires_after.anchor': only 'created_at' is supported.", 'expires_after.anchor');
  const n = typeof seconds === 'string' && /^\d+$/.test(seconds) ? Number(seconds) : Number.NaN;
  if (!(n >= 3600 && n <= 2592000)) {
    throw errors.badRequest("Invalid value for 'expires_after.seconds': an integer from 3600 (1 hour) to 2592000 (30 days).", 'expires_after.seconds');
  }
  return n;
}

const COLUMNS = 'id, purpose, filename, bytes, lines, created_at, expires_at';

/** POST /v1/files: the upload read, its lines checked, the file stored. */
export async function createFile(db: DbClient, key: ApiKeyRecord, limits: FileLimits, body: Buffer, contentType: string) {
  const upload = await readUpload(body, contentType);
  if (upload.content.byteLength > limits.maxBytes) throw errors.bodyTooLarge(limits.maxBytes);
  const lines = parseBatchFile(upload.content, limits.maxLines);
  const { rows } = await db.query<StoredFile>(
    `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8,
             now() + least(make_interval(days => $9::int), coalesce(make_interval(secs => $10::int), make_interval(days => $9::int))))
     returning ${COLUMNS}`,
    [
      newFileId(),
      key.tenant_id,
      key.id,
      upload.purpose,
      upload.filename,
      upload.content.byteLength,
      lines.length,
      upload.content,
      limits.retentionDays,
      upload.expiresAfterSeconds,
    ],
  );
  return fileObject(rows[0]);
}

export async function getFileBody(db: DbClient, key: ApiKeyRecord, id: string) {
  const { rows } = await db.query<StoredFile>(`select ${COLUMNS} from batch_files where id = $1 and tenant_id = $2 and expires_at > now()`, [
    id,
    key.tenant_id,
  ]);
  if (!rows[0]) throw fileNotFound(id);
  return fileObject(rows[0]);
}

/** A file's bytes as uploaded (or as a batch wrote them). */
export async function fileContent(db: DbClient, key: ApiKeyRecord, id: string): Promise<Buffer> {
  const { rows } = await db.query<{ content: Buffer }>('select content from batch_files where id = $1 and tenant_id = $2 and expires_at > now()', [
    id,
    key.tenant_id,
  ]);
  if (!rows[0]) throw fileNotFound(id);
  return rows[0].content;
}

export async function deleteFileBody(db: DbClient, key: ApiKeyRecord, id: string) {
  const { rowCount } = await db.query('delete from batch_files where id = $1 and tenant_id = $2 and expires_at > now()', [id, key.tenant_id]);
  if (!rowCount) throw fileNotFound(id);
  return { id, object: 'file' as const, deleted: true };
}

const ListQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(10000).default(10000),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).optional(),
  purpose: z.string().min(1).optional(),
});

/** GET /v1/files: the tenant's files, newest first unless `order=asc`, a page after the cursor `after` (a file id). */
export async function listFilesBody(db: DbClient, key: ApiKeyRecord, query: URLSearchParams) {
  const parsed = ListQuerySchema.safeParse({
    limit: query.get('limit') ?? undefined,
    order: query.get('order') ?? undefined,
    after: query.get('after') ?? undefined,
    purpose: query.get('purpose') ?? undefined,
  });
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { limit, order, after, purpose } = parsed.data;
  const cmp = order === 'asc' ? '>' : '<';
  const { rows } = await db.query<StoredFile>(
    `select ${COLUMNS} from batch_files
      where tenant_id = $1 and expires_at > now() and ($2::text is null or id ${cmp} $2) and ($3::text is null or purpose = $3)
        and purpose <> 'message_batch'
      order by id ${order} limit $4`,
    [key.tenant_id, after ?? null, purpose ?? null, limit + 1],
  );
  const data = rows.slice(0, limit).map(fileObject);
  return { object: 'list' as const, data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: rows.length > limit };
}

/** Deletes at most `limit` expired files (metering's sweeper, with the stored responses); how many it deleted. */
export async function sweepExpiredFiles(db: DbClient, limit = 100): Promise<number> {
  const { rowCount } = await db.query(
    'delete from batch_files where id in (select id from batch_files where expires_at <= now() order by expires_at limit $1 for update skip locked)',
    [limit],
  );
  return rowCount ?? 0;
}
