import type { VendorResult } from '../../batch/vendor-wire.ts';
import type { UsageCount } from '../../bus/messages.ts';
import { parseResultLines } from '../openai/batch.ts';
import { batchApiFetch } from '../shared/batch-http.ts';
import { ANTHROPIC_VERSION } from './api.ts';
import { inputCounts } from './response.ts';

// Anthropic's Message Batches API, as a worker calls it for `vendor` batch mode (docs/batch.md):
// the requests sent inline (POST {base}/messages/batches), the batch polled until
// processing_status is `ended`, its results read (JSONL, results_url's path), a cancel forwarded.
// base_url ends in /v1, as for the online calls (api.ts).

export interface MessageBatchObject {
  id: string;
  processing_status: 'in_progress' | 'canceling' | 'ended';
  results_url: string | null;
}

async function call(baseUrl: string, key: string | null, pathOrUrl: string, init: RequestInit = {}): Promise<Response> {
  const headers: Record<string, string> = {
    'anthropic-version': ANTHROPIC_VERSION,
    'user-agent': 'catraca-worker/0.1',
    ...(init.headers as Record<string, string>),
  };
  if (key) headers['x-api-key'] = key;
  const url = /^https?:\/\//.test(pathOrUrl) ? pathOrUrl : `${baseUrl.replace(/\/+$/, '')}/${pathOrUrl}`;
  return batchApiFetch(url, init, headers);
}

export async function createMessageBatch(
  baseUrl: string,
  key: string | null,
  requests: Array<{ custom_id: string; params: Record<string, unknown> }>,
): Promise<MessageBatchObject> {
  const r = await call(baseUrl, key, 'messages/batches', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ requests }),
  });
  return r.json() as Promise<MessageBatchObject>;
}

export const retrieveMessageBatch = async (baseUrl: string, key: string | null, id: string): Promise<MessageBatchObject> =>
  (await call(baseUrl, key, `messages/batches/${encodeURIComponent(id)}`)).json() as Promise<MessageBatchObject>;

export const cancelMessageBatch = async (baseUrl: string, key: string | null, id: string): Promise<MessageBatchObject> =>
  (await call(baseUrl, key, `messages/batches/${encodeURIComponent(id)}/cancel`, { method: 'POST' })).json() as Promise<MessageBatchObject>;

/** HTTP status of an Anthropic error type, as its online API answers it. */
const ERROR_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

/** One line of a message batch's results as a result: `succeeded` is a 200 with its message; `errored` its error's status and body; `canceled` and `expired` did not run. */
export function messageResultOf(line: unknown): VendorResult | null {
  const l = line as { custom_id?: unknown; result?: { type?: unknown; message?: unknown; error?: unknown } };
  if (typeof l?.custom_id !== 'string' || !l.result) return null;
  switch (l.result.type) {
    case 'succeeded':
      return { custom_id: l.custom_id, status_code: 200, body: l.result.message ?? null, error: null };
    case 'errored': {
      const body = l.result.error as { error?: { type?: unknown } } | undefined;
      const type = typeof body?.error?.type === 'string' ? body.error.type : 'api_error';
      return { custom_id: l.custom_id, status_code: ERROR_STATUS[type] ?? 500, body: body ?? null, error: null };
    }
    case 'canceled':
      return {
        custom_id: l.custom_id,
        status_code: null,
        body: null,
        error: { code: 'batch_cancelled', message: 'The batch was cancelled before this request ran.' },
      };
    case 'expired':
      return {
        custom_id: l.custom_id,
        status_code: null,
        body: null,
        error: { code: 'batch_expired', message: "The vendor's batch expired before this request ran." },
      };
    default:
      return null;
  }
}

/** An ended message batch's results, one per request. */
export async function messageBatchResults(baseUrl: string, key: string | null, b: MessageBatchObject): Promise<VendorResult[]> {
  // results_url is this path on the vendor's host: read from base_url, so the key never goes elsewhere
  const text = await (await call(baseUrl, key, `messages/batches/${encodeURIComponent(b.id)}/results`)).text();
  return parseResultLines(text)
    .map(messageResultOf)
    .filter((r): r is VendorResult => r !== null);
}

/** The usage of a succeeded request's message, in our convention (cache reads and writes in the prompt). */
export function messageUsage(message: unknown): UsageCount | null {
  const u = (message as { usage?: Record<string, unknown> } | null)?.usage;
  if (!u || typeof u !== 'object' || typeof u.input_tokens !== 'number') return null;
  return { ...inputCounts(u as Parameters<typeof inputCounts>[0]), completion_tokens: typeof u.output_tokens === 'number' ? u.output_tokens : 0 };
}
