import { withReasoningTokens } from '../anthropic/index.ts';
import { estimateCallPromptTokens } from '../shared/estimate.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, type VendorProtocol } from '../shared/http-stream.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { authenticate, converseStreamUrl, regionOf, requestHeaders } from './api.ts';
import { buildConverseBody } from './request.ts';
import { completionEvents, createByteStreamDecoder, httpError } from './response.ts';

function protocolOf(call: UpstreamCall): VendorProtocol {
  return {
    url: (baseUrl) => converseStreamUrl(baseUrl, call),
    headers: requestHeaders,
    body: buildConverseBody,
    streamDecoder: () => ({ data: () => undefined }), // never SSE: byteStreamDecoder
    byteStreamDecoder: createByteStreamDecoder,
    completion: (body, out) => completionEvents(body as Parameters<typeof completionEvents>[0], out),
    httpError,
    sign: (url, headers, payload, key) =>
      authenticate(url, headers, payload, key, call.model.base_url ? regionOf(call.model.base_url) : undefined, call.model.id),
  };
}

type UsageEvent = Extract<AdapterEvent, { type: 'usage' }>;

/** Amazon Bedrock's Converse API (`--protocol bedrock`, base_url the regional runtime endpoint, upstream model the model id). */
export function createBedrockAdapter(opts: HttpStreamAdapterOptions): Adapter {
  const http = createHttpStreamAdapter('bedrock', protocolOf, opts);
  return {
    ...http,
    async stream(call, signal, emit) {
      if (call.job.api === 'count_tokens') return countPrompt(call, emit);
      if (call.job.api !== undefined && call.job.api !== 'chat')
        throw new UpstreamError(400, 'unsupported_api', `This model does not serve ${call.job.api} requests.`);
      // Bedrock gives no reasoning count: the usage event waits for the count of the reasoning text before it
      let thinking = '';
      let usage: UsageEvent | undefined;
      try {
        await http.stream(call, signal, (ev) => {
          if (ev.type === 'reasoning') thinking += ev.content;
          else if (ev.type === 'usage' && thinking.length > 0) {
            usage = ev;
            return;
          }
          emit(ev);
        });
      } finally {
        if (usage) emit(await withReasoningTokens(usage, thinking));
      }
    },
  };
}

/** Bedrock's CountTokens is not called: our estimate of the prompt, as for OpenAI-compatible vendors. */
async function countPrompt(call: UpstreamCall, emit: (ev: AdapterEvent) => void): Promise<void> {
  const n = await estimateCallPromptTokens(call);
  emit({ type: 'body', json: JSON.stringify({ input_tokens: n }) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: n, completion_tokens: 0, estimated: true });
}
