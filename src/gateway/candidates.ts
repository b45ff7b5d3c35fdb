import { costMicros, type Prices } from '../billing/money.ts';
import { type CatalogEntry, holdPricesOf, pricesOf } from '../catalog/catalog.ts';
import { maxAttempts, type Routing } from '../runner/deployments.ts';
import { type OutputCap, outputTokens } from './hold.ts';

// The models a request may be answered by, in order (OpenRouter's `models`: the first that does
// not fail before its first byte answers), and the worst case the request is held for.

export interface Candidate {
  model: CatalogEntry;
  /** the model's own prices — a batch line's, its batch prices (the job carries them, a free request's too: the worker checks them against its catalog; a deployment's override is reported by the worker) */
  prices: Prices;
  /** every input token at the dearest input price of any deployment, output at the dearest output price (batch prices for a batch line) */
  holdPrices: Prices;
  /** most prompt tokens the vendor can bill */
  inputTokens: number;
  /** the output cap asked for (lowered to this model's maximum when the protocol allows), or null */
  requested: number | null;
  /** the output tokens the hold pays for when no cap was asked for: the model's maximum */
  wanted: number;
  /** the most deployments the worker may try for it (each may bill its prompt) */
  attempts: number;
}

export function candidateOf(
  model: CatalogEntry,
  cap: OutputCap,
  inputTokens: number,
  free: boolean,
  primary: boolean,
  routing?: Routing,
  batch = false,
): Candidate {
  // a fallback model whose maximum is below the asked cap answers with its maximum: the primary decides what is refused
  const { requested, wanted } = outputTokens(primary ? cap : { ...cap, clamp: true }, model);
  const zero = { input: 0n, output: 0n };
  return {
    model,
    prices: batch ? model.deployments[0].batchPrices : pricesOf(model),
    holdPrices: free ? zero : holdPricesOf(model, batch),
    inputTokens: free ? 0 : inputTokens,
    requested,
    wanted,
    attempts: Math.max(1, maxAttempts(model, routing)),
  };
}

/**
 * The hold: the worst case of every path the request can take. Candidate j answers after every
 * deployment of the candidates before it, and every other deployment of its own, failed in a way
 * the vendor may still bill (accepted, or cut while waiting for its first byte): each such attempt
 * carries its prompt into the one debit (src/runner/job.ts). So the worst case when j answers is
 * its full cost + (attempts_j - 1) prompts + attempts_i prompts of each i before it; the hold is the
 * largest of these.
 *
 * Why hold them rather than cap what a job may carry at what was held: the vendor bills us those
 * prompts whatever we hold, and the debit is what the request cost. A cap would debit less than
 * the cost (the gateway pays the difference, silently) and tie the debit to the tenant's balance at
 * admission; a hold that covers every billable attempt keeps "debit <= hold" true by construction,
 * so a settled request can never exceed what was reserved (no shortfall, no suspension).
 *
 * One candidate with no cap asked for may run with fewer output tokens than its maximum: `min` is
 * one output token (plus its extra attempts' prompts), and extraAttempts says what to keep aside
 * from what was held before sizing its output.
 */
export function holdFor(candidates: Candidate[]): { min: bigint; max: bigint } {
  if (candidates.length === 1) {
    const c = candidates[0];
    const full = costMicros(c.inputTokens, c.wanted, c.holdPrices);
    const extra = extraAttempts(c);
    return { max: full + extra, min: (c.requested !== null ? full : costMicros(c.inputTokens, 1, c.holdPrices)) + extra };
  }
  let before = 0n;
  let max = 0n;
  for (const c of candidates) {
    const prompt = costMicros(c.inputTokens, 0, c.holdPrices);
    const worst = before + costMicros(c.inputTokens, c.wanted, c.holdPrices) + BigInt(c.attempts - 1) * prompt;
    if (worst > max) max = worst;
    before += BigInt(c.attempts) * prompt;
  }
  return { min: max, max };
}

/** What the failed attempts on a candidate's other deployments may cost: one prompt each at its dearest price. */
export function extraAttempts(c: Candidate): bigint {
  return c.attempts > 1 ? BigInt(c.attempts - 1) * costMicros(c.inputTokens, 0, c.holdPrices) : 0n;
}
