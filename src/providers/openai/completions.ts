import { COMPLETIONS_FORWARDED } from '../../protocols/completions/schema.ts';
import { jsonChunkDecoder, type VendorProtocol } from '../shared/http-stream.ts';
import { mapHttpError, redact } from '../shared/upstream-errors.ts';
import { type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { endpointUrl, requestHeaders } from './api.ts';

// OpenAI's legacy /completions, for catalog entries with legacy_completions. The vendor sees an
// allowlisted body: model = upstream_model, the one prompt, the documented parameters that cost
// nothing beyond tokens (suffix, stop, temperature, top_p, penalties, seed, user) and the entry's
// extra_params; max_tokens = job.max_tokens (what the hold paid for); always streamed with
// stream_options.include_usage (usage is the source of truth). n, best_of, echo and logprobs are
// refused at the door and never sent.

export function completionsRequestBody(call: UpstreamCall): Record<string, unknown> {
  const { job, model } = call;
  const client = job.body;
  const body: Record<string, unknown> = { model: model.upstream_model, prompt: client.prompt };
  for (const k of [...COMPLETIONS_FORWARDED, ...model.extra_params]) if (client[k] != null && body[k] === undefined) body[k] = client[k];
  body.max_tokens = job.max_tokens;
  body.stream = true;
  body.stream_options = { include_usage: true };
  return body;
}

interface TextCompletionLike {
  choices?: Array<{ text?: unknown; finish_reason?: unknown }> | null;
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
  error?: { message?: unknown } | string;
}

/** Events of one text_completion chunk (or of a whole text_completion: the same shape). */
export function textCompletionEvents(chunk: TextCompletionLike, out: AdapterEvent[], secret: string | null): void {
  if (chunk.error !== undefined) {
    const m = typeof chunk.error === 'string' ? chunk.error : typeof chunk.error?.message === 'string' ? chunk.error.message : 'unknown error';
    throw new UpstreamError(502, 'upstream_error', `The upstream provider failed mid-stream: ${redact(m, secret).slice(0, 500)}`);
  }
  const choice = chunk.choices?.[0];
  if (choice) {
    if (typeof choice.text === 'string' && choice.text.length > 0) out.push({ type: 'delta', content: choice.text });
    if (typeof choice.finish_reason === 'string') out.push({ type: 'finish', reason: choice.finish_reason });
  }
  const u = chunk.usage;
  if (u && typeof u.prompt_tokens === 'number' && typeof u.completion_tokens === 'number' && u.prompt_tokens >= 0 && u.completion_tokens >= 0) {
    out.push({ type: 'usage', prompt_tokens: Math.round(u.prompt_tokens), completion_tokens: Math.round(u.completion_tokens) });
  }
}

export const completionsProtocol: VendorProtocol = {
  url: (base) => endpointUrl(base, 'completions'),
  headers: requestHeaders,
  body: completionsRequestBody,
  streamDecoder: jsonChunkDecoder((chunk, out, key) => textCompletionEvents(chunk as TextCompletionLike, out, key)),
  completion(body, out, key) {
    const answer = body as TextCompletionLike;
    textCompletionEvents(answer, out, key);
    // a whole answer always ends; a vendor that left out finish_reason stopped on its own
    if (answer.error === undefined && !out.some((e) => e.type === 'finish')) out.push({ type: 'finish', reason: 'stop' });
  },
  httpError: mapHttpError,
};
