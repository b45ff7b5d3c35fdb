import { upstreamMessage, upstreamParams } from '../../chat/params.ts';
import type { UpstreamCall } from '../types.ts';

// Request transform: an allowlist, never the client's body as is. The vendor sees
//   messages       with OpenAI's documented message fields only (src/chat/params.ts)
//   parameters     OpenAI's documented ones that cost nothing beyond tokens, plus the catalog
//                  entry's extra_params; OpenRouter's routing fields and our `sim` never
//   model          = the catalog entry's upstream_model
//   stream         = true, stream_options.include_usage = true (usage is the source of truth)
//   max_tokens     = job.max_tokens (the cap the hold paid for), under one name, never both:
//                    max_completion_tokens when the client used it, when the catalog marks the
//                    model a reasoning model (`--reasoning true`), or when the deployment is
//                    OpenAI's own API (api.openai.com); else max_tokens. OpenAI's chat reference:
//                    max_tokens "is now deprecated in favor of max_completion_tokens, and is not
//                    compatible with o-series models"; generic OpenAI-compatible hosts (vLLM,
//                    Ollama, older proxies) may know only max_tokens, so it stays theirs.

/** OpenAI's own API, which knows max_completion_tokens for every chat model. */
const OPENAI_API = /^https?:\/\/api\.openai\.com(?::\d+)?(?:[/?#]|$)/i;

/** Whether the output cap goes to the vendor as max_completion_tokens (else max_tokens). */
export function capsAsMaxCompletionTokens(call: UpstreamCall): boolean {
  const client = call.job.body as Record<string, unknown>;
  if (client.max_completion_tokens !== undefined && client.max_completion_tokens !== null) return true;
  return call.model.reasoning || (call.model.base_url !== null && OPENAI_API.test(call.model.base_url));
}

export function buildUpstreamBody(call: UpstreamCall): Record<string, unknown> {
  const { job, model } = call;
  const client = job.body as Record<string, unknown>;
  const body: Record<string, unknown> = {
    model: model.upstream_model,
    messages: (client.messages as Array<Record<string, unknown>>).map(upstreamMessage),
    ...upstreamParams(client, model),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (capsAsMaxCompletionTokens(call)) body.max_completion_tokens = job.max_tokens;
  else body.max_tokens = job.max_tokens;
  return body;
}
