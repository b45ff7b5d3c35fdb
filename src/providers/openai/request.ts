import { upstreamMessage, upstreamParams } from '../../chat/params.ts';
import type { UpstreamCall } from '../types.ts';

// Request transform: an allowlist, never the client's body as is. The vendor sees
//   messages       with OpenAI's documented message fields only (src/chat/params.ts)
//   parameters     OpenAI's documented ones that cost nothing beyond tokens, plus the catalog
//                  entry's extra_params; OpenRouter's routing fields and our `sim` never
//   model          = the catalog entry's upstream_model
//   stream         = true, stream_options.include_usage = true (usage is the source of truth)
//   max_tokens     = job.max_tokens (the cap the hold paid for). If the client used the newer
//                    max_completion_tokens (required by OpenAI's reasoning models), that name is
//                    kept with the capped value: never both.
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
  if (client.max_completion_tokens !== undefined && client.max_completion_tokens !== null) body.max_completion_tokens = job.max_tokens;
  else body.max_tokens = job.max_tokens;
  return body;
}
