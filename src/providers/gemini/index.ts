import { estimateCallPromptTokens } from '../shared/estimate.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { authenticate, requestHeaders, streamUrl, VertexTokens, vertexOf } from './api.ts';
import { buildGeminiBody } from './request.ts';
import { completionEvents, createStreamDecoder, httpError } from './response.ts';

export interface GeminiAdapterOptions extends HttpStreamAdapterOptions {
  /** Vertex AI's token minter (tests give one with their own clock). */
  tokens?: VertexTokens;
}

/** Google's Gemini API and Vertex AI (`--protocol gemini`; Vertex with --vertex-project and --region). */
export function createGeminiAdapter(opts: GeminiAdapterOptions): Adapter {
  const tokens = opts.tokens ?? new VertexTokens();
  const protocolOf = (call: UpstreamCall): VendorProtocol => ({
    url: (baseUrl) => streamUrl(baseUrl, call),
    headers: requestHeaders,
    body: buildGeminiBody,
    streamDecoder: createStreamDecoder,
    completion: (body, out, key) => completionEvents(body as Parameters<typeof completionEvents>[0], out, key),
    httpError,
    sign: (_url, headers, _payload, key) =>
      authenticate(headers, key, call.model.base_url !== null && vertexOf(call.model.base_url) !== undefined, tokens, call.model.id),
  });
  const http = createHttpStreamAdapter('gemini', protocolOf, opts);
  return {
    ...http,
    stream(call, signal, emit) {
      if (call.job.api === 'count_tokens') return countPrompt(call, emit);
      if (call.job.api !== undefined && call.job.api !== 'chat')
        return Promise.reject(new UpstreamError(400, 'unsupported_api', `This model does not serve ${call.job.api} requests.`));
      return http.stream(call, signal, emit);
    },
  };
}

/** countTokens is not called: our estimate of the prompt, as for OpenAI-compatible vendors. */
async function countPrompt(call: UpstreamCall, emit: (ev: AdapterEvent) => void): Promise<void> {
  const n = await estimateCallPromptTokens(call);
  emit({ type: 'body', json: JSON.stringify({ input_tokens: n }) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: n, completion_tokens: 0, estimated: true });
}
