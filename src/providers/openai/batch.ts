import { randomBytes } from 'node:crypto';
import type { VendorResult } from '../../batch/vendor-wire.ts';
import type { UsageCount } from '../../bus/messages.ts';
import { batchApiFetch } from '../shared/batch-http.ts';

// OpenAI's Batch API with its Files API, as a worker calls it for `vendor` batch mode
// (docs/batch.md): the lines uploaded as one JSONL file (purpose "batch"), a batch created on it,
// polled, cancelled; its output and error files read back into one result per line. base_url ends
// in /v1, as for the online calls (api.ts).

export interface OpenAIBatchObject {
  id: string;
  status: string;
  /** epoch seconds */
  created_at?: number;
  metadata?: Record<string, string> | null;
  output_file_id: string | null;
  error_file_id: string | null;
  errors?: { data?: Array<{ code?: string; message?: string; line?: number | null }> } | null;
}

export const OPENAI_BATCH_ENDED = ['completed', 'failed', 'expired', 'cancelled'];

const url = (baseUrl: string, path: string) => `${baseUrl.replace(/\/+$/, '')}/${path}`;

async function call(baseUrl: string, key: string | null, path: string, init: RequestInit = {}): Promise<Response> {
  const headers: Record<string, string> = { 'user-agent': 'catraca-worker/0.1', ...(init.headers as Record<string, string>) };
  if (key) headers.authorization = `Bearer ${key}`;
  return batchApiFetch(url(baseUrl, path), init, headers);
}

async function json<T>(baseUrl: string, key: string | null, path: string, init: RequestInit = {}): Promise<T> {
  return (await call(baseUrl, key, path, init)).json() as Promise<T>;
}

/** Uploads the lines (one JSON object each) as a batch input file; its id. */
export async function uploadBatchFile(baseUrl: string, key: string | null, lines: unknown[], filename: string): Promise<string> {
  const boundary = `catraca${randomBytes(12).toString('hex')}`;
  const content = Buffer.from(`${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  const body = Buffer.concat([
    Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`),
    Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="${filename}"\r\ncontent-type: application/jsonl\r\n\r\n`),
    content,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  const file = await json<{ id: string }>(baseUrl, key, 'files', {
    method: 'POST',
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
    body,
  });
  return file.id;
}

export function createBatch(
  baseUrl: string,
  key: string | null,
  inputFileId: string,
  endpoint: string,
  metadata: Record<string, string>,
): Promise<OpenAIBatchObject> {
  return json(baseUrl, key, 'batches', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_file_id: inputFileId, endpoint, completion_window: '24h', metadata }),
  });
}

/** The most pages of 100 batches a look-up reads (findBatch): 2 000 batches created since `since`. */
export const FIND_BATCH_PAGES = 20;

/**
 * The newest batch (GET /batches lists them newest first, 100 a page) whose metadata has `key` =
 * `value`, among those created at or after `since` (epoch seconds); null when none is (or the
 * search read FIND_BATCH_PAGES pages without reaching `since`).
 */
export async function findBatch(
  baseUrl: string,
  key: string | null,
  match: { key: string; value: string; since: number },
  pages = FIND_BATCH_PAGES,
): Promise<OpenAIBatchObject | null> {
  let after: string | undefined;
  for (let p = 0; p < pages; p++) {
    const page = await json<{ data?: OpenAIBatchObject[]; has_more?: boolean; last_id?: string | null }>(
      baseUrl,
      key,
      `batches?limit=100${after ? `&after=${encodeURIComponent(after)}` : ''}`,
    );
    const data = page.data ?? [];
    for (const b of data) {
      if (b.metadata?.[match.key] === match.value) return b;
    }
    const last = data.at(-1);
    if (!page.has_more || !last || (last.created_at ?? 0) < match.since) return null;
    after = page.last_id ?? last.id;
  }
  return null;
}

export const retrieveBatch = (baseUrl: string, key: string | null, id: string): Promise<OpenAIBatchObject> =>
  json(baseUrl, key, `batches/${encodeURIComponent(id)}`);

export const cancelBatch = (baseUrl: string, key: string | null, id: string): Promise<OpenAIBatchObject> =>
  json(baseUrl, key, `batches/${encodeURIComponent(id)}/cancel`, { method: 'POST' });

async function fileLines(baseUrl: string, key: string | null, id: string | null): Promise<unknown[]> {
  if (!id) return [];
  const text = await (await call(baseUrl, key, `files/${encodeURIComponent(id)}/content`)).text();
  return parseResultLines(text);
}

/** The lines of an output or error file (JSONL); a line that is not JSON is skipped. */
export function parseResultLines(text: string): unknown[] {
  const out: unknown[] = [];
  for (const row of text.split(/\r?\n/)) {
    if (!row.trim()) continue;
    try {
      out.push(JSON.parse(row));
    } catch {}
  }
  return out;
}

/** One line of an output or error file as a result: its HTTP status and body, or its error. */
export function resultOf(line: unknown): VendorResult | null {
  const l = line as { custom_id?: unknown; response?: { status_code?: unknown; body?: unknown } | null; error?: { code?: unknown; message?: unknown } | null };
  if (typeof l?.custom_id !== 'string') return null;
  const status = typeof l.response?.status_code === 'number' ? l.response.status_code : null;
  const error = l.error ? { code: String(l.error.code ?? 'vendor_error'), message: String(l.error.message ?? '') } : null;
  return { custom_id: l.custom_id, status_code: status, body: l.response?.body ?? null, error };
}

/** An ended batch's results: every line of its output and error files. */
export async function batchResults(baseUrl: string, key: string | null, b: OpenAIBatchObject): Promise<VendorResult[]> {
  const lines = [...(await fileLines(baseUrl, key, b.output_file_id)), ...(await fileLines(baseUrl, key, b.error_file_id))];
  return lines.map(resultOf).filter((r): r is VendorResult => r !== null);
}

/** The usage an answered line reports (chat completions, completions, embeddings; responses' input/output tokens), OpenAI's convention. */
export function usageOfBody(body: unknown): UsageCount | null {
  const u = (body as { usage?: Record<string, unknown> } | null)?.usage;
  if (!u || typeof u !== 'object') return null;
  const n = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);
  const prompt = n(u.prompt_tokens) ?? n(u.input_tokens);
  if (prompt === undefined) return null;
  const completion = n(u.completion_tokens) ?? n(u.output_tokens) ?? 0;
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  const out = (u.completion_tokens_details ?? u.output_tokens_details) as Record<string, unknown> | undefined;
  const usage: UsageCount = { prompt_tokens: prompt, completion_tokens: completion };
  const cached = n(details?.cached_tokens);
  if (cached) usage.cached_tokens = cached;
  const reasoning = n(out?.reasoning_tokens);
  if (reasoning) usage.reasoning_tokens = reasoning;
  return usage;
}
