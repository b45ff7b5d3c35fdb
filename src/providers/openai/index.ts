import { createHttpStreamAdapter, type HttpStreamAdapterOptions, jsonChunkDecoder, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { estimateCallPromptTokens } from '../shared/estimate.ts';
import { chatCompletionsUrl, requestHeaders } from './api.ts';
import { completionsProtocol } from './completions.ts';
import { embeddingsProtocol } from './embeddings.ts';
import { mapHttpError } from '../shared/upstream-errors.ts';
import { buildUpstreamBody } from './request.ts';
import { chunkEvents, completionEvents } from './response.ts';

export type OpenAIAdapterOptions = HttpStreamAdapterOptions;

/** OpenAI's chat-completions wire format (OpenAI, OpenRouter, Groq, Together, vLLM, Ollama, …). */
export const openaiProtocol: VendorProtocol = {
  url: chatCompletionsUrl,
  headers: requestHeaders,
  body: buildUpstreamBody,
  streamDecoder: jsonChunkDecoder(chunkEvents),
  completion: (body, out, key) => completionEvents(body, out, key),
  httpError: mapHttpError,
};

/** The vendor API of a job: chat completions, or embeddings and legacy completions where the job is one. */
function protocolOf(call: UpstreamCall): VendorProtocol {
  if (call.job.api === 'embeddings') return embeddingsProtocol(call);
  if (call.job.api === 'completions') return completionsProtocol;
  return openaiProtocol;
}

/** Any vendor speaking OpenAI's API (chat completions, embeddings, legacy completions): base_url + key from process.env[api_key_env]. */
export function createOpenAIAdapter(opts: OpenAIAdapterOptions): Adapter {
  const http = createHttpStreamAdapter('openai', protocolOf, opts);
  return {
    ...http,
    stream(call, signal, emit) {
      // the front door translates Messages requests into chat for this adapter: a Messages body here is a bug, never sent on
      if (call.job.api === 'messages')
        return Promise.reject(new UpstreamError(400, 'unsupported_api', 'This model does not serve Messages requests natively.'));
      return call.job.api === 'count_tokens' ? countPrompt(call, emit) : http.stream(call, signal, emit);
    },
  };
}

/**
 * A token count (/v1/messages/count_tokens, translated to chat by the front door): OpenAI-compatible
 * vendors have no count endpoint, so it is our estimate of what the vendor would bill for the
 * prompt (o200k_base over the messages, the tools' JSON, images at the catalog's bound).
 */
async function countPrompt(call: UpstreamCall, emit: (ev: AdapterEvent) => void): Promise<void> {
  const n = await estimateCallPromptTokens(call);
  emit({ type: 'body', json: JSON.stringify({ input_tokens: n }) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: n, completion_tokens: 0, estimated: true });
}
