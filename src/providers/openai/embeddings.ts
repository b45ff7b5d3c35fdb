import { inputList } from '../../protocols/embeddings/input.ts';
import { type EncodingFormat, embeddingsBody, encodeVector } from '../shared/embeddings.ts';
import { redact } from '../shared/upstream-errors.ts';
import { mapHttpError } from '../shared/upstream-errors.ts';
import type { VendorProtocol } from '../shared/http-stream.ts';
import { type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { endpointUrl, jsonRequestHeaders } from './api.ts';

// OpenAI's /embeddings (not streamed). The vendor sees an allowlisted body: model =
// upstream_model, input, encoding_format (what the client asked, float by default), dimensions,
// user, and the catalog entry's extra_params. Its answer becomes one `body` event in our shape
// (src/providers/shared/embeddings.ts) and a usage event of its prompt_tokens (no output).

const FORWARDED = ['dimensions', 'user'];

export function embeddingsRequestBody(call: UpstreamCall): Record<string, unknown> {
  const { job, model } = call;
  const client = job.body;
  const body: Record<string, unknown> = { model: model.upstream_model, input: client.input, encoding_format: formatOf(call) };
  for (const k of [...FORWARDED, ...model.extra_params]) if (client[k] != null && body[k] === undefined) body[k] = client[k];
  return body;
}

const formatOf = (call: UpstreamCall): EncodingFormat => (call.job.body.encoding_format === 'base64' ? 'base64' : 'float');

interface VendorEmbeddings {
  data?: unknown;
  usage?: { prompt_tokens?: unknown } | null;
  error?: { message?: unknown } | string;
}

/** The events of the vendor's answer: our body (vectors in the client's encoding, in input order) and the usage. */
export function embeddingsEvents(call: UpstreamCall, answer: VendorEmbeddings, out: AdapterEvent[], secret: string | null): void {
  if (answer.error !== undefined) {
    const m = typeof answer.error === 'string' ? answer.error : typeof answer.error?.message === 'string' ? answer.error.message : 'unknown error';
    throw new UpstreamError(502, 'upstream_error', `The upstream provider failed: ${redact(m, secret).slice(0, 500)}`);
  }
  const inputs = inputList(call.job.body.input).length;
  const data = Array.isArray(answer.data) ? (answer.data as Array<{ index?: unknown; embedding?: unknown } | null>) : [];
  const vectors = new Array<number[] | string>(inputs);
  const format = formatOf(call);
  for (const [i, item] of data.entries()) {
    const index = typeof item?.index === 'number' ? item.index : i;
    const v = index >= 0 && index < inputs && vectors[index] === undefined ? encodeVector(item?.embedding, format) : null;
    if (v === null) throw new UpstreamError(502, 'upstream_error', 'The upstream provider sent an unreadable embeddings answer.');
    vectors[index] = v;
  }
  if (data.length !== inputs) {
    throw new UpstreamError(502, 'upstream_error', `The upstream provider answered ${data.length} embeddings for ${inputs} inputs.`);
  }
  const p = answer.usage?.prompt_tokens;
  const prompt = typeof p === 'number' && p >= 0 ? Math.round(p) : undefined;
  out.push({ type: 'body', json: embeddingsBody(call.model.id, vectors, prompt ?? 0) });
  out.push({ type: 'finish', reason: 'stop' });
  // no usage from the vendor: the worker counts the input itself (estimated)
  if (prompt !== undefined) out.push({ type: 'usage', prompt_tokens: prompt, completion_tokens: 0 });
}

/** The wire format of one embeddings call (its answer is read against the call's inputs and encoding). */
export function embeddingsProtocol(call: UpstreamCall): VendorProtocol {
  return {
    url: (base) => endpointUrl(base, 'embeddings'),
    headers: jsonRequestHeaders,
    body: embeddingsRequestBody,
    streamDecoder: () => ({
      data() {
        throw new UpstreamError(502, 'upstream_error', 'The upstream provider streamed an answer to an embeddings request.');
      },
    }),
    completion: (body, out, key) => embeddingsEvents(call, body as VendorEmbeddings, out, key),
    httpError: mapHttpError,
  };
}
