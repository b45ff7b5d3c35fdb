import { costMicros, type Prices } from '../billing/money.ts';
import { type CatalogEntry, holdPricesOf, pricesOf } from '../catalog/catalog.ts';
import { type OutputCap, outputTokens } from './hold.ts';

// The models a request may be answered by, in order (OpenRouter's `models`: the first that does
// not fail before its first byte answers), and the worst case the request is held for.

export interface Candidate {
  model: CatalogEntry;
  /** the model's own prices (the job carries them, a free request's too: the worker checks them against its catalog; a deployment's override is reported by the worker) */
  prices: Prices;
  /** every input token at the dearest input price of any deployment, output at the dearest output price */
  holdPrices: Prices;
  /** most prompt tokens the vendor can bill */
  inputTokens: number;
  /** the output cap asked for (lowered to this model's maximum when the protocol allows), or null */
  requested: number | null;
  /** the output tokens the hold pays for when no cap was asked for: the model's maximum */
  wanted: number;
}

export function candidateOf(model: CatalogEntry, cap: OutputCap, inputTokens: number, free: boolean, primary: boolean): Candidate {
  // a fallback model whose maximum is below the asked cap answers with its maximum: the primary decides what is refused
  const { requested, wanted } = outputTokens(primary ? cap : { ...cap, clamp: true }, model);
  const zero = { input: 0n, output: 0n };
  return {
    model,
    prices: pricesOf(model),
    holdPrices: free ? zero : holdPricesOf(model),
    inputTokens: free ? 0 : inputTokens,
    requested,
    wanted,
  };
}

/**
 * The hold: one candidate may run with fewer tokens than its maximum when no cap was asked for
 * (min = one output token). With fallbacks it is their dearest worst case, plus the prompt of
 * every other one (an attempt cut while waiting for its first byte may still be billed).
 */
export function holdFor(candidates: Candidate[]): { min: bigint; max: bigint } {
  const full = candidates.map((c) => costMicros(c.inputTokens, c.wanted, c.holdPrices));
  if (candidates.length === 1) {
    const c = candidates[0];
    return { max: full[0], min: c.requested !== null ? full[0] : costMicros(c.inputTokens, 1, c.holdPrices) };
  }
  let dearest = 0;
  for (let i = 1; i < full.length; i++) if (full[i] > full[dearest]) dearest = i;
  let max = full[dearest];
  candidates.forEach((c, i) => {
    if (i !== dearest) max += costMicros(c.inputTokens, 0, c.holdPrices);
  });
  return { min: max, max };
}
