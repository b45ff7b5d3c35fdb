import { estimateTokens } from '../shared/estimate.ts';
import { mapHttpError } from '../shared/upstream-errors.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
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

type UsageEvent = Extract<AdapterEvent, { type: 'usage' }>;

/**
 * Reasoning tokens of an answer whose usage does not give them: Anthropic bills thinking inside
 * output_tokens and (before `output_tokens_details`) reports no part of it as thinking. They are
 * then the tokenizer's count (o200k_base, as every estimate of ours) of the thinking text received,
 * at most output_tokens; billing is unchanged (all output at the output price).
 */
export async function withReasoningTokens(usage: UsageEvent, thinking: string): Promise<UsageEvent> {
  if (usage.reasoning_tokens !== undefined || thinking.length === 0) return usage;
  return { ...usage, reasoning_tokens: Math.min(await estimateTokens(thinking), usage.completion_tokens) };
}

export function createAnthropicAdapter(opts: HttpStreamAdapterOptions): Adapter {
  const http = createHttpStreamAdapter('anthropic', protocolOf, opts);
  return {
    ...http,
    // the usage event waits for the count of the thinking text before it (it is the last event)
    async stream(call, signal, emit) {
      let thinking = '';
      let usage: UsageEvent | undefined;
      try {
        await http.stream(call, signal, (ev) => {
          if (ev.type === 'reasoning') thinking += ev.content;
          else if (ev.type === 'usage' && ev.reasoning_tokens === undefined && thinking.length > 0) {
            usage = ev;
            return;
          }
          emit(ev);
        });
      } finally {
        if (usage) emit(await withReasoningTokens(usage, thinking));
      }
    },
    // a Messages job's prompt is Anthropic's shape (system apart, content blocks), not chat's
    async countUsage(call, output) {
      if (call.job.api !== 'messages') return http.countUsage(call, output);
      return { usage: { prompt_tokens: await estimateMessagesPrompt(call), completion_tokens: await estimateTokens(output) }, estimated: true };
    },
  };
}
