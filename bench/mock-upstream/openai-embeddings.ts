import type http from 'node:http';
import { embeddingTokens, simEmbedding } from '../../src/providers/sim/embed.ts';
import type { MockStats } from './stats.ts';
import { readJsonBody, refuseUnknown, sendJson, sendOpenAIError, sendVendorFailure } from './openai-wire.ts';

// OpenAI's POST /v1/embeddings, as the mock vendor speaks it:
//   vectors     simEmbedding(<request model>, input, dims) (src/providers/sim/embed.ts): the sim's
//               deterministic vectors salted with the model name; MOCK_EMBEDDING_DIMENSIONS by
//               default, `dimensions` honoured up to that (text-embedding-ada-002 refuses it)
//   encoding    float: each float32 written as the shortest decimal that reads back to it (as
//               OpenAI writes them); base64: the float32 values little-endian, in base64
//   usage       prompt_tokens = total_tokens = Σ the sim's count of each text, or its token ids
//   refusals    OpenAI's 400s: unknown fields, a missing or empty input, more than 2048 inputs,
//               an input over MOCK_EMBEDDING_CONTEXT tokens, a bad encoding_format or dimensions
//   failures    mock-embed-500 → 500 server_error; mock-embed-429 → 429 with retry-after: 1

export const MOCK_EMBEDDING_DIMENSIONS = 1536;
export const MOCK_EMBEDDING_CONTEXT = 8192;
const PARAMS = new Set(['model', 'input', 'encoding_format', 'dimensions', 'user']);
const INVALID_INPUT = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.";

/** The shortest decimal that reads back as this float32 (how OpenAI prints its vectors). */
export function float32Text(v: number): string {
  for (let p = 1; p < 9; p++) {
    const s = Number(v.toPrecision(p));
    if (Math.fround(s) === v) return String(s);
  }
  return String(Number(v.toPrecision(9)));
}

type Input = string | number[];

function inputsOf(input: unknown): Input[] | null {
  const isIds = (a: unknown) => Array.isArray(a) && a.length > 0 && a.every((t) => Number.isInteger(t) && (t as number) >= 0);
  if (typeof input === 'string') return input.length ? [input] : null;
  if (!Array.isArray(input) || input.length === 0 || input.length > 2048) return null;
  if (isIds(input)) return [input as number[]];
  return input.every((i) => (typeof i === 'string' && i.length > 0) || isIds(i)) ? (input as Input[]) : null;
}

function vectorJson(v: Float32Array, format: string): string {
  if (format === 'base64') return JSON.stringify(Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64'));
  return `[${Array.from(v, float32Text).join(',')}]`;
}

export function handleEmbeddings(req: http.IncomingMessage, res: http.ServerResponse, stats: MockStats): void {
  readJsonBody(req, res, (body) => {
    stats.lastBody = body;
    if (refuseUnknown(res, body, PARAMS)) return;
    const model = typeof body.model === 'string' ? body.model : '';
    if (model === 'mock-embed-500') return sendVendorFailure(res, '500');
    if (model === 'mock-embed-429') return sendVendorFailure(res, '429');
    if (body.input === undefined) return sendOpenAIError(res, 400, "'input' is a required property");
    const inputs = inputsOf(body.input);
    if (!inputs) return sendOpenAIError(res, 400, INVALID_INPUT);
    const format = body.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64') {
      return sendOpenAIError(res, 400, "Invalid value for 'encoding_format': must be 'float' or 'base64'.", { param: 'encoding_format' });
    }
    let dims = MOCK_EMBEDDING_DIMENSIONS;
    if (body.dimensions !== undefined) {
      if (model === 'text-embedding-ada-002') return sendOpenAIError(res, 400, 'This model does not support specifying dimensions.', { param: 'dimensions' });
      const d = body.dimensions;
      if (typeof d !== 'number' || !Number.isInteger(d) || d < 1 || d > MOCK_EMBEDDING_DIMENSIONS) {
        return sendOpenAIError(res, 400, `Invalid value for 'dimensions': must be an integer from 1 to ${MOCK_EMBEDDING_DIMENSIONS}.`, { param: 'dimensions' });
      }
      dims = d;
    }
    let prompt = 0;
    for (const input of inputs) {
      const n = embeddingTokens(input);
      if (n > MOCK_EMBEDDING_CONTEXT) {
        return sendOpenAIError(
          res,
          400,
          `This model's maximum context length is ${MOCK_EMBEDDING_CONTEXT} tokens, however you requested ${n} tokens (${n} in your prompt; 0 for the completion). Please reduce your prompt; or completion length.`,
        );
      }
      prompt += n;
    }
    const data = inputs.map((input, i) => `{"object":"embedding","index":${i},"embedding":${vectorJson(simEmbedding(model, input, dims), format)}}`);
    sendJson(
      res,
      200,
      `{"object":"list","data":[${data.join(',')}],"model":${JSON.stringify(model)},"usage":{"prompt_tokens":${prompt},"total_tokens":${prompt}}}`,
    );
  });
}
