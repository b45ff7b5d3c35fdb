import { estimateTokens } from '../shared/estimate.ts';
import { mapHttpError } from '../shared/upstream-errors.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, type UpstreamCall, UpstreamError } from '../types.ts';
import { callUrl, requestHeaders } from './api.ts';
import { estimateMessagesPrompt } from './estimate.ts';
import { buildCountTokensBody, buildMessagesBody } from './messages.ts';
import { buildAnthropicBody } from './request.ts';
import { completionEvents, createStreamDecoder } from './response.ts';

/** The request body for the job's API: a chat request translated, or a client's Messages request (or token count) passed through. */
function body(call: UpstreamCall): unknown {
  switch (call.job.api) {
    case 'messages':
      return buildMessagesBody(call);
    case 'count_tokens':
      return buildCountTokensBody(call);
    case undefined:
    case 'chat':
      return buildAnthropicBody(call);
    default:
      throw new UpstreamError(400, 'unsupported_api', `This model does not serve ${call.job.api} requests.`);
  }
}

const httpError: VendorProtocol['httpError'] = (status, text, headers, key) =>
  // Same error body shape as OpenAI's ({error:{type,message}}); 529 is Anthropic's "overloaded".
  status === 529
    ? new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.')
    : mapHttpError(status, text, headers, key);

/** Anthropic's Messages API (`catraca model set --pool anthropic --base-url https://api.anthropic.com/v1`), for one call. */
function protocolOf(call: UpstreamCall): VendorProtocol {
  return {
    url: (baseUrl) => callUrl(baseUrl, call),
    headers: (key, bytes) => requestHeaders(key, bytes, call),
    body,
    streamDecoder: createStreamDecoder,
    completion: (b, out, key) => completionEvents(b as Parameters<typeof completionEvents>[0], out, key, call),
    httpError,
  };
}

export function createAnthropicAdapter(opts: HttpStreamAdapterOptions): Adapter {
  const http = createHttpStreamAdapter('anthropic', protocolOf, opts);
  return {
    ...http,
    // a Messages job's prompt is Anthropic's shape (system apart, content blocks), not chat's
    async countUsage(call, output) {
      if (call.job.api !== 'messages') return http.countUsage(call, output);
      return { usage: { prompt_tokens: await estimateMessagesPrompt(call), completion_tokens: await estimateTokens(output) }, estimated: true };
    },
  };
}
