import { z } from 'zod';
import { speaksNatively } from '../../catalog/apis.ts';
import type { EmbeddingInput } from './input.ts';
import { parseOrRefuse } from '../request-body.ts';
import type { ParsedRequest, Protocol } from '../types.ts';
import { EmbeddingsEncoder } from './encoder.ts';
import { embeddingsInputBound, overlongInput, readEmbeddingInput } from './input.ts';

// POST /v1/embeddings: OpenAI's embeddings, for models of kind `embedding` whose adapter embeds
// natively (sim, openai). Billed on the vendor's prompt tokens; there is no output.

export const EMBEDDINGS_PARAMS = ['model', 'input', 'encoding_format', 'dimensions', 'user'];

const EmbeddingsRequestSchema = z.looseObject({
  model: z.string().min(1, 'model is required'),
  input: z.unknown().refine((v) => v !== undefined, 'input is required'),
  encoding_format: z.enum(['float', 'base64'], { message: "must be 'float' or 'base64'" }).optional().nullable(),
  dimensions: z.number().int('must be a positive integer').positive('must be a positive integer').optional().nullable(),
  user: z.string().optional().nullable(),
});

export interface EmbeddingsParsed extends ParsedRequest {
  inputs: EmbeddingInput[];
}

export const embeddings: Protocol<EmbeddingsParsed> = {
  name: 'embeddings',
  path: '/v1/embeddings',
  kind: 'embedding',
  parse(json) {
    const body = parseOrRefuse(EmbeddingsRequestSchema, json);
    const inputs = readEmbeddingInput(body.input);
    const { model, ...rest } = body;
    // null means "not given", as OpenAI reads it: the vendor sees only what was set
    for (const k of Object.keys(rest)) if (rest[k] === null) delete rest[k];
    return { model, stream: false, body: rest, inputs, endUser: typeof body.user === 'string' ? body.user : undefined };
  },
  check(req, model) {
    for (const key in req.body) {
      if (!EMBEDDINGS_PARAMS.includes(key) && !model.extra_params.includes(key)) {
        return { param: key, code: 'unsupported_parameter', message: `Unrecognized request argument supplied: ${key}` };
      }
    }
    if (!speaksNatively(model, 'embeddings')) {
      return {
        param: 'model',
        code: 'unsupported_parameter',
        message: `The model "${model.id}" cannot embed: its vendor protocol (${model.protocol}) has no embeddings API.`,
      };
    }
    const overlong = overlongInput(req.inputs, model);
    return overlong && { ...overlong, code: 'unsupported_parameter' };
  },
  inputBound: (req, model) => embeddingsInputBound(req.inputs, model),
  // no output: the hold is the input's worst case alone
  outputCap: () => ({ requested: 0, param: 'max_tokens', clamp: true }),
  job: (req) => ({ api: 'embeddings', body: req.body }),
  encoder: (ctx) => new EmbeddingsEncoder(ctx),
  errorBody: (e) => ({ body: e.toJSON() }),
};
