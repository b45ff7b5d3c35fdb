import { estimateCallPromptTokens } from '../shared/estimate.ts';
import { createHttpStreamAdapter, type HttpStreamAdapterOptions, jsonChunkDecoder, type VendorProtocol } from '../shared/http-stream.ts';
import { mapHttpError, redact } from '../shared/upstream-errors.ts';
import { chunkEvents, completionEvents } from '../openai/response.ts';
import { buildUpstreamBody } from '../openai/request.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { chatCompletionsUrl, requestHeaders } from './api.ts';

// Azure OpenAI: OpenAI's chat-completions wire format (request, chunks, usage with cached and
// reasoning tokens) on Azure's URL, with Azure's api-key header and its error codes.

/**
 * Azure's errors carry OpenAI's shape ({error:{code,message}}) with codes of their own: a missing
 * deployment is 404 DeploymentNotFound (the catalog points at a deployment that is not there), a
 * prompt its content filter refused is 400 content_filter (the client's prompt: passed on).
 */
const httpError: VendorProtocol['httpError'] = (status, text, headers, key) => {
  if (status === 400) {
    try {
      const j = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
      if (j.error?.code === 'content_filter')
        return new UpstreamError(400, 'content_filter', redact(String(j.error.message ?? 'The prompt was filtered by the vendor.'), key).slice(0, 2000));
    } catch {
      /* not JSON */
    }
  }
  return mapHttpError(status, text, headers, key);
};

function protocolOf(call: UpstreamCall): VendorProtocol {
  return {
    url: (baseUrl) => chatCompletionsUrl(baseUrl, call.model.upstream_model),
    headers: requestHeaders,
    body: buildUpstreamBody,
    streamDecoder: jsonChunkDecoder(chunkEvents),
    completion: (body, out, key) => completionEvents(body, out, key),
    httpError,
  };
}

/** Azure OpenAI deployments (`--protocol azure`, base_url the resource or its /openai/v1, upstream model the deployment name). */
export function createAzureAdapter(opts: HttpStreamAdapterOptions): Adapter {
  const http = createHttpStreamAdapter('azure', protocolOf, opts);
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

/** Azure has no token-count endpoint: our estimate of the prompt, as for other OpenAI-compatible vendors. */
async function countPrompt(call: UpstreamCall, emit: (ev: AdapterEvent) => void): Promise<void> {
  const n = await estimateCallPromptTokens(call);
  emit({ type: 'body', json: JSON.stringify({ input_tokens: n }) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: n, completion_tokens: 0, estimated: true });
}
