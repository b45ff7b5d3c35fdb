import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import type { Adapter } from '../types.ts';
import { chatCompletionsUrl, requestHeaders } from './api.ts';
import { mapHttpError } from '../shared/upstream-errors.ts';
import { buildUpstreamBody } from './request.ts';
import { chunkEvents, completionEvents } from './response.ts';

export type OpenAIAdapterOptions = HttpStreamAdapterOptions;
export { coalesceDeltas } from '../shared/http-stream.ts';

/** OpenAI's chat-completions wire format (OpenAI, OpenRouter, Groq, Together, vLLM, Ollama, …). */
export const openaiProtocol: VendorProtocol = {
  url: chatCompletionsUrl,
  headers: requestHeaders,
  body: buildUpstreamBody,
  streamDecoder: (key) => ({
    data(payload, out) {
      if (payload === '[DONE]') return 'done';
      let chunk: unknown;
      try {
        chunk = JSON.parse(payload);
      } catch {
        return; // a vendor's stray non-JSON event: skip
      }
      if (chunk && typeof chunk === 'object') chunkEvents(chunk as object, out, key);
    },
  }),
  completion: (body, out, key) => completionEvents(body, out, key),
  httpError: mapHttpError,
};

/** Any vendor speaking OpenAI's chat-completions API: base_url + key from process.env[api_key_env]. */
export function createOpenAIAdapter(opts: OpenAIAdapterOptions): Adapter {
  return createHttpStreamAdapter('openai', openaiProtocol, opts);
}
