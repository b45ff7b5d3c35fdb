import { COUNT_FORWARDED, FORWARDED, vendorFields } from '../../protocols/messages/policy.ts';
import type { UpstreamCall } from '../types.ts';

// Request transform of a native Messages job (a client's /v1/messages request to an
// Anthropic-protocol model): the front door already kept its messages and fields to the
// allowlists of src/protocols/messages/policy.ts; here the top-level allowlist is applied again
// (defense in depth) and the gateway's own values set:
//   model        = the catalog entry's upstream_model
//   max_tokens   = job.max_tokens (the client's, lowered to the model's maximum: what the hold paid for)
//   stream       = true
//   thinking     a budget_tokens the lowered max_tokens no longer exceeds is lowered below it
//   anthropic-beta  the header (api.ts), from the job's `anthropic_beta`, never sent in the body

export function buildMessagesBody({ job, model }: UpstreamCall): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  const out: Record<string, unknown> = { model: model.upstream_model, messages: b.messages, ...vendorFields(b, FORWARDED) };
  out.max_tokens = job.max_tokens;
  out.stream = true;
  const thinking = out.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (thinking?.type === 'enabled' && typeof thinking.budget_tokens === 'number' && thinking.budget_tokens >= job.max_tokens) {
    out.thinking = { ...thinking, budget_tokens: job.max_tokens - 1 };
  }
  return out;
}

/** A count_tokens job: the same request minus max_tokens and stream, to POST {base}/messages/count_tokens. */
export function buildCountTokensBody({ job, model }: UpstreamCall): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  return { model: model.upstream_model, messages: b.messages, ...vendorFields(b, COUNT_FORWARDED) };
}
