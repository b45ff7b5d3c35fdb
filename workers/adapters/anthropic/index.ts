import { mapHttpError } from '../shared/upstream-errors.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, UpstreamError } from '../types.ts';
import { messagesUrl, requestHeaders } from './api.ts';
import { buildAnthropicBody } from './request.ts';
import { completionEvents, createStreamDecoder } from './response.ts';

/** Anthropic's Messages API (`catraca model set --pool anthropic --base-url https://api.anthropic.com/v1`). */
export const anthropicProtocol: VendorProtocol = {
  url: messagesUrl,
  headers: requestHeaders,
  body: buildAnthropicBody,
  streamDecoder: createStreamDecoder,
  completion: (body, out, key) => completionEvents(body as Parameters<typeof completionEvents>[0], out, key),
  // Same error body shape as OpenAI's ({error:{type,message}}); 529 is Anthropic's "overloaded".
  httpError: (status, text, headers, key) =>
    status === 529
      ? new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.')
      : mapHttpError(status, text, headers, key),
};

export function createAnthropicAdapter(opts: HttpStreamAdapterOptions): Adapter {
  return createHttpStreamAdapter('anthropic', anthropicProtocol, opts);
}
