import { UpstreamError } from '../types.ts';

// One call to a vendor's batch API (OpenAI's Batch and Files, Anthropic's Message Batches), as a
// worker makes it in `vendor` batch mode: unreachable → 502 `upstream_unreachable`; an answer not 2xx
// → `upstream_error` with the vendor's own message (5xx as 502). Below the front door's 50 s wait
// for the worker's answer (src/batch/vendor.ts).
const TIMEOUT_MS = 40_000;

export async function batchApiFetch(url: string, init: RequestInit, headers: Record<string, string>): Promise<Response> {
  let r: Response;
  try {
    r = await fetch(url, { ...init, headers, signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (err) {
    throw new UpstreamError(502, 'upstream_unreachable', `The vendor's batch API could not be reached: ${(err as Error).message}`);
  }
  if (!r.ok) {
    const text = await r.text().catch(() => '');
    let message = text.slice(0, 500);
    try {
      message = JSON.parse(text)?.error?.message ?? message;
    } catch {}
    throw new UpstreamError(r.status >= 500 ? 502 : r.status, 'upstream_error', `The vendor's batch API answered ${r.status}: ${message}`);
  }
  return r;
}
