import { z } from 'zod';
import { REASONING_EFFORTS } from '../../chat/reasoning.ts';
import type { ParsedRequest } from '../types.ts';

// OpenRouter's request fields on chat completions, and what catraca does with them:
//   models, route      fallbacks: the models tried in order when one fails before its first byte
//   provider           order, only, ignore, allow_fallbacks, sort: applied to the model's
//                      deployments; the other documented fields are accepted and not applied
//                      (there is one operator and one policy here); anything else is a 400
//   reasoning          effort or max_tokens → the vendor's reasoning effort or thinking budget
//                      (models the catalog marks as reasoning); exclude hides the reasoning text
//   usage.include      the usage chunk, as stream_options.include_usage
//   transforms         accepted, not applied (documented in docs/api.md)

const PROVIDER_APPLIED = ['order', 'only', 'ignore', 'allow_fallbacks', 'sort'] as const;
/** Documented OpenRouter provider fields that make no difference here: accepted, not applied. */
export const PROVIDER_NOT_APPLIED = [
  'require_parameters',
  'data_collection',
  'zdr',
  'enforce_distillable_text',
  'quantizations',
  'max_price',
  'preferred_min_throughput',
  'preferred_max_latency',
  'experimental',
] as const;

const slugs = z.array(z.string().min(1).max(128)).max(32);
export const ProviderSchema = z.strictObject({
  order: slugs.optional(),
  only: slugs.optional(),
  ignore: slugs.optional(),
  allow_fallbacks: z.boolean().optional(),
  sort: z.enum(['price', 'throughput', 'latency']).optional(),
  ...Object.fromEntries(PROVIDER_NOT_APPLIED.map((f) => [f, z.unknown().optional()])),
});

export const ReasoningSchema = z.strictObject({
  effort: z.enum(REASONING_EFFORTS).optional(),
  max_tokens: z.number().int().positive().optional(),
  exclude: z.boolean().optional(),
  enabled: z.boolean().optional(),
});

export const OpenRouterFields = {
  models: z.array(z.string().min(1).max(256)).min(1).max(8).optional(),
  route: z.literal('fallback').optional().nullable(),
  provider: ProviderSchema.optional().nullable(),
  reasoning: ReasoningSchema.optional().nullable(),
  transforms: z.array(z.string()).optional(),
};

/** The fallbacks and provider preferences of a chat request (`model` first, then `models` not already named). */
export function routingOf(body: {
  model?: string;
  models?: string[] | null;
  provider?: z.infer<typeof ProviderSchema> | null;
}): Pick<ParsedRequest, 'model' | 'fallbacks' | 'routing'> {
  const listed = body.models ?? [];
  const model = body.model ?? listed[0];
  const fallbacks = listed.filter((m) => m !== model);
  const p = body.provider;
  const routing =
    p && PROVIDER_APPLIED.some((f) => p[f] !== undefined)
      ? Object.fromEntries(PROVIDER_APPLIED.filter((f) => p[f] !== undefined).map((f) => [f, p[f]]))
      : undefined;
  return { model: model ?? '', ...(fallbacks.length ? { fallbacks } : {}), ...(routing ? { routing } : {}) };
}
