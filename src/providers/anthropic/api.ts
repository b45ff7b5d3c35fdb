import type { UpstreamCall } from '../types.ts';

// Endpoints and headers of Anthropic's Messages API. base_url ends in /v1 (https://api.anthropic.com/v1).
export const ANTHROPIC_VERSION = '2023-06-01';

export function messagesUrl(baseUrl: string): URL {
  return new URL(baseUrl.replace(/\/+$/, '') + '/messages');
}

export function countTokensUrl(baseUrl: string): URL {
  return new URL(baseUrl.replace(/\/+$/, '') + '/messages/count_tokens');
}

export const callUrl = (baseUrl: string, call: UpstreamCall): URL => (call.job.api === 'count_tokens' ? countTokensUrl(baseUrl) : messagesUrl(baseUrl));

/** The anthropic-beta values the front door let through (src/protocols/messages/policy.ts), carried in the job body. */
export function jobBetas(call: UpstreamCall): string[] {
  const betas = (call.job.body as { anthropic_beta?: unknown }).anthropic_beta;
  return Array.isArray(betas) ? betas.filter((b): b is string => typeof b === 'string' && /^[a-z0-9-]+$/.test(b)) : [];
}

export function requestHeaders(apiKey: string | null, bodyBytes: number, call?: UpstreamCall): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: call?.job.api === 'count_tokens' ? 'application/json' : 'text/event-stream',
    'content-length': String(bodyBytes),
    'anthropic-version': ANTHROPIC_VERSION,
    'user-agent': 'catraca-worker/0.1',
  };
  const betas = call ? jobBetas(call) : [];
  if (betas.length) h['anthropic-beta'] = betas.join(',');
  if (apiKey) h['x-api-key'] = apiKey;
  return h;
}
