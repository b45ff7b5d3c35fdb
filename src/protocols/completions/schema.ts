import { z } from 'zod';
import { errors } from '../../errors.ts';

// What POST /v1/completions (OpenAI's legacy text completions) accepts, and the one prompt it carries.

const penalty = z.number().min(-2).max(2).optional().nullable();

export const CompletionsRequestSchema = z.looseObject({
  model: z.string().min(1, 'model is required'),
  prompt: z.unknown(),
  suffix: z.string().optional().nullable(),
  echo: z.boolean().optional().nullable(),
  logprobs: z.number().int().min(0).max(5).optional().nullable(),
  max_tokens: z.number().int().positive().optional().nullable(),
  stop: z
    .union([z.string(), z.array(z.string()).max(4, 'at most 4 stop sequences')])
    .optional()
    .nullable(),
  temperature: z.number().min(0).max(2).optional().nullable(),
  top_p: z.number().min(0).max(1).optional().nullable(),
  n: z.number().int().positive().optional().nullable(),
  best_of: z.number().int().positive().optional().nullable(),
  presence_penalty: penalty,
  frequency_penalty: penalty,
  seed: z.number().int().optional().nullable(),
  user: z.string().optional().nullable(),
  stream: z.boolean().optional().nullable(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional().nullable() }).optional().nullable(),
});

export type CompletionsRequest = z.infer<typeof CompletionsRequestSchema>;

/** Fields of the request besides the prompt that a vendor with native legacy completions is sent. */
export const COMPLETIONS_FORWARDED = ['suffix', 'stop', 'temperature', 'top_p', 'presence_penalty', 'frequency_penalty', 'seed', 'user'] as const;

/** Every field /v1/completions knows (others: 400 unless the model's extra_params list them). */
export const COMPLETIONS_PARAMS = new Set<string>([
  ...COMPLETIONS_FORWARDED,
  'model',
  'prompt',
  'echo',
  'logprobs',
  'max_tokens',
  'n',
  'best_of',
  'stream',
  'stream_options',
  'sim',
]);

/** OpenAI's default output cap for legacy completions. */
export const DEFAULT_MAX_TOKENS = 16;

/** The one prompt of a request: a text, or token ids (only for vendors with native legacy completions). */
export type Prompt = { text: string } | { tokens: number[] };

const isTokenId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const BATCH = "Invalid value for 'prompt': batch prompts are not relayed (OpenAI answers one choice per prompt); send one prompt per request.";

/** The request's prompt: a string, or an array of one string, of token ids, or of one token-id array. */
export function readPrompt(prompt: unknown): Prompt {
  if (typeof prompt === 'string') return { text: prompt };
  if (prompt === undefined || prompt === null) throw errors.badRequest("Invalid value for 'prompt': prompt is required.", 'prompt');
  if (!Array.isArray(prompt) || prompt.length === 0) {
    throw errors.badRequest("Invalid value for 'prompt': must be a string, an array of one string, or token ids.", 'prompt');
  }
  if (prompt.every(isTokenId)) return { tokens: prompt };
  if (prompt.length > 1) throw errors.badRequest(BATCH, 'prompt');
  const only = prompt[0];
  if (typeof only === 'string') return { text: only };
  if (Array.isArray(only) && only.length > 0 && only.every(isTokenId)) return { tokens: only };
  throw errors.badRequest("Invalid value for 'prompt': must be a string, an array of one string, or token ids.", 'prompt');
}
