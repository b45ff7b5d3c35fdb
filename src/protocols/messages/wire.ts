import type { UsageCount } from '../../bus/messages.ts';
import type { CatracaError } from '../../errors.ts';

// Anthropic's wire objects shared by the streamed and whole answers: usage, stop reasons, errors.

export interface AnthropicUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
  output_tokens: number;
}

/**
 * Our usage (OpenAI's convention: prompt_tokens counts cache reads and writes) in Anthropic's,
 * where input_tokens is only the input neither read from nor written to the cache.
 */
export function anthropicUsage(u: UsageCount): AnthropicUsage {
  const read = u.cached_tokens ?? 0;
  const write5m = u.cache_write_tokens ?? 0;
  const write1h = u.cache_write_1h_tokens ?? 0;
  return {
    input_tokens: Math.max(0, u.prompt_tokens - read - write5m - write1h),
    cache_creation_input_tokens: write5m + write1h,
    cache_read_input_tokens: read,
    cache_creation: { ephemeral_5m_input_tokens: write5m, ephemeral_1h_input_tokens: write1h },
    output_tokens: u.completion_tokens,
  };
}

const STOP: Record<string, string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use', content_filter: 'refusal' };

/** An OpenAI finish reason (what frames carry) as Anthropic's stop_reason; a stop sequence when the vendor named it. */
export function stopReason(finishReason: string, stopSequence: string | undefined): { stop_reason: string; stop_sequence: string | null } {
  if (stopSequence !== undefined) return { stop_reason: 'stop_sequence', stop_sequence: stopSequence };
  return { stop_reason: STOP[finishReason] ?? finishReason, stop_sequence: null };
}

/** Anthropic's status and error type for one of ours: a 503 (no worker, overloaded) is Anthropic's 529. */
export function anthropicError(e: CatracaError): { status: number; type: string } {
  switch (e.status) {
    case 400:
      return { status: 400, type: 'invalid_request_error' };
    case 401:
      return { status: 401, type: 'authentication_error' };
    case 402:
      return { status: 402, type: 'billing_error' };
    case 403:
      return { status: 403, type: 'permission_error' };
    case 404:
      return { status: 404, type: 'not_found_error' };
    case 413:
      return { status: 413, type: 'request_too_large' };
    case 429:
      return { status: 429, type: 'rate_limit_error' };
    case 503:
    case 529:
      return { status: 529, type: 'overloaded_error' };
    case 504:
      return { status: 504, type: 'timeout_error' };
    default:
      return e.status >= 500 ? { status: e.status, type: 'api_error' } : { status: e.status, type: 'invalid_request_error' };
  }
}

export function errorObject(e: CatracaError): { type: 'error'; error: { type: string; message: string } } {
  return { type: 'error', error: { type: anthropicError(e).type, message: e.message } };
}
