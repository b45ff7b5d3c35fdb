import { UpstreamError } from '../types.ts';

// Maps upstream HTTP failures to what our client sees. Upstream messages are passed on only where
// they help the client fix its own request (400), and always scrubbed of anything key-like: an
// OpenAI 401 echoes part of the key, 429s name the upstream organisation.

const KEYLIKE = /\b(?:sk|pk|rk|key|org|proj)-[A-Za-z0-9_\-*.]{6,}/g;

export function redact(text: string, secret: string | null): string {
  let t = text;
  if (secret && secret.length >= 4) t = t.split(secret).join('[redacted]');
  return t.replace(KEYLIKE, '[redacted]');
}

/** A vendor's "the prompt is longer than this model's context" (OpenAI's code, Anthropic's and others' wording). */
const CONTEXT_TOO_LONG = /context[_ ]length|maximum context|context window|prompt is too long|too many tokens|exceeds the model/i;

function upstreamCode(bodyText: string): string | undefined {
  try {
    const j = JSON.parse(bodyText) as { error?: { code?: unknown } };
    return typeof j.error?.code === 'string' ? j.error.code : undefined;
  } catch {
    return undefined;
  }
}

function upstreamMessage(bodyText: string): string | undefined {
  try {
    const j = JSON.parse(bodyText) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof j.error === 'string') return j.error;
    if (j.error && typeof j.error.message === 'string') return j.error.message;
    if (typeof j.message === 'string') return j.message;
  } catch {
    /* not JSON */
  }
  return undefined;
}

export function parseRetryAfter(headers: Record<string, string | string[] | undefined>): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (Number.isFinite(ms) && ms > 0) return Math.max(1, Math.ceil(ms / 1000));
  const raw = headers['retry-after'];
  const v = Array.isArray(raw) ? raw[0] : raw;
  if (!v) return undefined;
  const s = Number(v);
  if (Number.isFinite(s) && s >= 0) return Math.ceil(s);
  const at = Date.parse(v);
  if (Number.isFinite(at)) return Math.max(0, Math.ceil((at - Date.now()) / 1000));
  return undefined;
}

export function mapHttpError(status: number, bodyText: string, headers: Record<string, string | string[] | undefined>, secret: string | null): UpstreamError {
  if (status === 400 || status === 413 || status === 422) {
    const m = upstreamMessage(bodyText);
    if (upstreamCode(bodyText) === 'context_length_exceeded' || (m && CONTEXT_TOO_LONG.test(m)))
      return new UpstreamError(400, 'context_length_exceeded', redact(m ?? 'The prompt is longer than the model accepts.', secret).slice(0, 2000));
    return new UpstreamError(
      400,
      'upstream_bad_request',
      m ? redact(m, secret).slice(0, 2000) : `The upstream provider rejected the request (HTTP ${status}).`,
    );
  }
  if (status === 401 || status === 403) {
    return new UpstreamError(
      502,
      'upstream_auth_failed',
      "The upstream provider rejected the gateway's credentials for this model; the operator must fix its configuration.",
    );
  }
  if (status === 404)
    return new UpstreamError(502, 'upstream_model_not_found', 'The upstream provider does not serve the model configured for this catalog entry.');
  if (status === 408) return new UpstreamError(504, 'upstream_timeout', 'The upstream provider timed out.');
  if (status === 429) {
    const retry = parseRetryAfter(headers);
    return new UpstreamError(
      429,
      'upstream_rate_limited',
      retry !== undefined
        ? `The upstream provider is rate limiting requests; retry after ${retry} s.`
        : 'The upstream provider is rate limiting requests; retry shortly.',
      retry,
    );
  }
  return new UpstreamError(502, 'upstream_error', `The upstream provider failed (HTTP ${status}).`);
}

const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  'EPIPE',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
]);

/** A transport error before any response: the vendor could not be reached. */
export function mapConnectError(err: unknown): UpstreamError {
  const code = (err as { code?: string } | null)?.code;
  return new UpstreamError(502, 'upstream_unreachable', `The upstream provider could not be reached${code && UNREACHABLE.has(code) ? ` (${code})` : ''}.`);
}
