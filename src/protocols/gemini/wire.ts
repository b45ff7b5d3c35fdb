import type { UsageCount } from '../../bus/messages.ts';
import type { CatracaError } from '../../errors.ts';

// Google's wire objects shared by the streamed and whole answers: usage, finish reasons, errors.

export interface UsageMetadata {
  promptTokenCount: number;
  candidatesTokenCount: number;
  totalTokenCount: number;
  cachedContentTokenCount?: number;
  thoughtsTokenCount?: number;
}

/**
 * Our usage (prompt_tokens counts cache reads and writes; completion_tokens counts reasoning) in
 * Google's: candidatesTokenCount is the answer without the thoughts, totalTokenCount the sum of all.
 */
export function usageMetadata(u: UsageCount): UsageMetadata {
  const thoughts = u.reasoning_tokens ?? 0;
  const out: UsageMetadata = {
    promptTokenCount: u.prompt_tokens,
    candidatesTokenCount: Math.max(0, u.completion_tokens - thoughts),
    totalTokenCount: u.prompt_tokens + u.completion_tokens,
  };
  if (u.cached_tokens) out.cachedContentTokenCount = u.cached_tokens;
  if (thoughts) out.thoughtsTokenCount = thoughts;
  return out;
}

const FINISH: Record<string, string> = { stop: 'STOP', length: 'MAX_TOKENS', tool_calls: 'STOP', content_filter: 'SAFETY' };

/** An OpenAI finish reason (what frames carry) as Gemini's finishReason. */
export const finishReason = (reason: string): string => FINISH[reason] ?? 'OTHER';

/**
 * Google's status and canonical code for one of ours. A key that is not valid is Google's 400
 * INVALID_ARGUMENT ("API key not valid"); a missing one 403 PERMISSION_DENIED; an empty balance
 * keeps its 402 (not Google's 429, which clients retry) as RESOURCE_EXHAUSTED, naming the credits.
 */
export function googleStatus(e: CatracaError): { code: number; status: string } {
  if (e.code === 'missing_api_key') return { code: 403, status: 'PERMISSION_DENIED' };
  switch (e.status) {
    case 400:
    case 413:
      return { code: e.status, status: 'INVALID_ARGUMENT' };
    case 401:
      return { code: 400, status: 'INVALID_ARGUMENT' };
    case 402:
      return { code: 402, status: 'RESOURCE_EXHAUSTED' };
    case 403:
      return { code: 403, status: 'PERMISSION_DENIED' };
    case 404:
      return { code: 404, status: 'NOT_FOUND' };
    case 405:
      return { code: 405, status: 'UNIMPLEMENTED' };
    case 408:
    case 504:
      return { code: e.status, status: 'DEADLINE_EXCEEDED' };
    case 429:
      return { code: 429, status: 'RESOURCE_EXHAUSTED' };
    case 499:
      return { code: 499, status: 'CANCELLED' };
    case 503:
      return { code: 503, status: 'UNAVAILABLE' };
    default:
      return e.status >= 500 ? { code: e.status, status: 'INTERNAL' } : { code: e.status, status: 'FAILED_PRECONDITION' };
  }
}

/** Google's error body: `{"error":{"code","message","status"}}` (a wrong key worded as Google words it). */
export function googleErrorBody(e: CatracaError): { error: { code: number; message: string; status: string } } {
  const { code, status } = googleStatus(e);
  const message = e.status === 401 && e.code === 'invalid_api_key' ? 'API key not valid. Please pass a valid API key.' : e.message;
  return { error: { code, message, status } };
}
