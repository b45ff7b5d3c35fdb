import type { AdmitResult } from '../billing/ledger.ts';
import { affordableOutputTokens, costMicros, formatBrl, type Prices } from '../billing/money.ts';
import type { CatalogEntry } from '../catalog/catalog.ts';
import { type CatracaError, errors } from '../errors.ts';

// The worst case a request is held for, and the answer when the balance or the key's limit cannot
// cover it. Every protocol's request is bounded the same way: its prompt at most `inputTokens`
// (the protocol's bound), its output at most the cap it asked for or the model's maximum.

export interface OutputCap {
  requested: number | null;
  param: string;
  clamp: boolean;
}

/** The output cap the hold pays for, or the 400 for a cap above the model's maximum that may not be lowered. */
export function outputTokens(cap: OutputCap, model: Pick<CatalogEntry, 'max_output_tokens'>): { requested: number | null; wanted: number } {
  let requested = cap.requested;
  if (requested !== null && requested > model.max_output_tokens) {
    if (!cap.clamp) {
      throw errors.badRequest(`max_tokens is too large: ${requested}. This model supports at most ${model.max_output_tokens} completion tokens.`, cap.param);
    }
    requested = model.max_output_tokens;
  }
  return { requested, wanted: requested ?? model.max_output_tokens };
}

/** What to hold: `max` for the worst case; `min` when the request names no cap (it may run with fewer tokens). */
export function holdRange(inputTokens: number, requested: number | null, wanted: number, prices: Prices): { min: bigint; max: bigint } {
  const max = costMicros(inputTokens, wanted, prices);
  return { max, min: requested !== null ? max : costMicros(inputTokens, 1, prices) };
}

/** The 402 for a refused admission: what the request needs against what is available. */
export function refusal(result: AdmitResult, inputTokens: number, wanted: number, prices: Prices, portalUrl?: string): CatracaError {
  const affordable = affordableOutputTokens(result.available, inputTokens, prices, wanted);
  const what = result.status === 'key_limit' ? "this key's remaining limit" : 'your available balance';
  const message =
    affordable >= 0
      ? `This request requires more credits, or fewer max_tokens. You requested up to ${wanted} tokens, but can only afford ${affordable} with ${what} of R$ ${formatBrl(result.available)}.`
      : `This request requires more credits: its input alone can cost up to R$ ${formatBrl(costMicros(inputTokens, 0, prices))}, more than ${what} of R$ ${formatBrl(result.available)}.`;
  const hint = portalUrl ? ` Top up at ${portalUrl}.` : '';
  return result.status === 'key_limit' ? errors.keyLimit(message) : errors.insufficientBalance(message + hint);
}
