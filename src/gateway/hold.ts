import type { Admission, AdmitInput } from '../billing/admission.ts';
import type { AdmitResult } from '../billing/ledger.ts';
import { affordableOutputTokens, costMicros, formatBrl, type PriceStrings, type Prices, pricesOfStrings, usageCostMicros } from '../billing/money.ts';
import { DoneSchema, FRAME, FrameErrorSchema, parsePayload, type RawFrame } from '../bus/frames.ts';
import type { UsageCount } from '../bus/messages.ts';
import type { CatalogEntry } from '../catalog/catalog.ts';
import { type CatracaError, errors } from '../errors.ts';
import { createLogger } from '../log.ts';

const log = createLogger('gateway');

// A request's hold: the worst case it is held for, the answer when admission refuses it (the
// balance or the key's limit cannot cover it, a rate limit), and its life from admission to its one
// end (`HeldRequest`). Every protocol's request is bounded the same way: its prompt at most
// `inputTokens` (the protocol's bound), its output at most the cap it asked for or the model's maximum.

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

/** What a request's hold needs of admission (src/billing/admission.ts). */
export type HoldAdmission = Pick<Admission, 'admit' | 'finish' | 'release'>;

/** What the answer to a refused admission names. */
export interface AdmitContext {
  /** the answer's headers: x-ratelimit-* are set here once admission has counted the request */
  headers: Record<string, string>;
  /** the model the request names: a 402 is written about its worst case */
  /** what the hold bounds of the first candidate (candidates.ts: a Candidate has these) */
  primary: { inputTokens: number; wanted: number; holdPrices: Prices };
  /** tokens counted against the key's tokens-per-minute limit */
  rateTokens: number;
  endUser?: string;
  portalUrl?: string;
  /** admission found the key revoked: forget it */
  onKeyRevoked(): void;
  /** admission answered (metrics: how long it took) */
  onAnswer?(): void;
}

/** The error that answers an admission that did not admit the request (null: admitted). */
export function admissionError(result: AdmitResult, ctx: AdmitContext): CatracaError | null {
  const resetS = () => Math.max(1, Math.ceil(Number(result.rl_reset_ms) / 1000));
  switch (result.status) {
    case 'ok':
      return null;
    case 'rate_limited':
      return errors.rateLimited(resetS(), { ...ctx.headers });
    case 'concurrency_limited':
      return errors.concurrencyLimited(result.rl_limit ?? 0);
    case 'tpm_limited':
      return errors.tpmLimited(ctx.rateTokens, result.rl_limit ?? 0, result.rl_remaining ?? 0, resetS());
    case 'end_user_limit':
      return errors.endUserLimit(ctx.endUser ?? '', result.available);
    case 'tenant_suspended':
      return errors.tenantSuspended();
    case 'key_revoked':
      ctx.onKeyRevoked();
      return errors.revokedKey();
    default:
      return refusal(result, ctx.primary.inputTokens, ctx.primary.wanted, ctx.primary.holdPrices, ctx.portalUrl);
  }
}

/** What the tenant is debited for this usage (metering computes the same from the usage message): nothing on a free route. */
export function usageCost(free: boolean, modelPrices: Prices, usage: UsageCount, prices?: PriceStrings, extra?: string): bigint {
  if (free) return 0n;
  return usageCostMicros(usage, prices ? pricesOfStrings(prices) : modelPrices) + BigInt(extra ?? '0');
}

type HoldState =
  /** not admitted (yet, or refused): nothing to give back */
  | 'none'
  /** admitted, and no worker has the job: if the request ends now, the hold goes back */
  | 'held'
  /** a worker may have the job: it settles through metering (the worker's usage), or expires */
  | 'out'
  /** given back, or its end counted: nothing more is done with it */
  | 'ended';

/**
 * One request's hold, from admission to its one end. Admission's answer becomes the client's error
 * or a hold (the request's own, or a share of the door's lease). Then exactly one of:
 *
 * - `release`: nothing will settle against it (no worker took the job, or the worker publishes no
 *   usage for what it did): it goes back now;
 * - `settle(cost)`: the worker's terminal frame said what the request will be debited (metering
 *   debits it from the worker's usage message); the door's lease counts it. `null`: the end was
 *   never seen, and the worst case stays counted until the lease closes or the hold expires.
 *
 * Every later call is a no-op: a hold is given back, or counted, once.
 */
export class HeldRequest {
  /** the hold jobs settle against: the request id, or the door's lease id ('' when nothing is held) */
  id = '';
  private state: HoldState = 'none';
  private costed = false;

  constructor(
    private readonly admission: HoldAdmission,
    readonly requestId: string,
    /** a free route (token counts) is counted against rate limits, and holds nothing */
    readonly free: boolean,
  ) {}

  /** Admits the request, or throws the client's error. Returns what was held. */
  async admit(input: AdmitInput, ctx: AdmitContext): Promise<bigint> {
    const result = await this.admission.admit(input);
    ctx.onAnswer?.();
    if (result.rl_limit !== null && result.rl_reset_ms !== null) {
      ctx.headers['x-ratelimit-limit'] = String(result.rl_limit);
      ctx.headers['x-ratelimit-remaining'] = String(Math.max(0, result.rl_remaining ?? 0));
      ctx.headers['x-ratelimit-reset'] = String(Date.now() + Number(result.rl_reset_ms));
    }
    const refused = admissionError(result, ctx);
    if (refused) throw refused;
    this.id = result.hold;
    this.state = 'held';
    if (this.free) {
      // counted against the key's rate limit, and nothing to settle: the (zero) hold goes back now
      this.id = '';
      await this.release();
    }
    return result.held;
  }

  /** Whether the hold is still this request's to give back or count. */
  get open(): boolean {
    return this.state === 'held' || this.state === 'out';
  }

  /** A job under this hold went to a worker (or may have): from now on it settles through metering. */
  jobSent(): void {
    if (this.state === 'held') this.state = 'out';
  }

  /** No worker has the job any more and none will publish usage for it (the dispatcher refused it, or the worker failed it as retryable): the hold is the request's again. */
  jobReturned(): void {
    if (this.state === 'out') this.state = 'held';
  }

  /** Nothing will settle against the hold: it goes back now. Rejects when admission could not be told (the hold then expires). */
  async release(): Promise<void> {
    if (!this.open) return;
    this.state = 'ended';
    await this.admission.release(this.requestId);
  }

  /** `release`, not awaited: a failure is logged (the hold then expires). */
  releaseSoon(): void {
    if (!this.open) return;
    this.release().catch((err) => log.warn('hold release failed', { request_id: this.requestId, err }));
  }

  /** The request ended and no worker has its job (a failure before or at dispatch, the client gone): the hold goes back. */
  async releaseUnsent(): Promise<void> {
    if (this.state === 'held') await this.release();
  }

  /** The request's end as its worker reported it: what it will be debited, or null when unknown. */
  settle(cost: bigint | null): void {
    if (!this.open) return;
    this.state = 'ended';
    if (cost !== null) this.costed = true;
    this.admission.finish(this.requestId, cost);
  }

  /** Whether its worker reported a cost: the request will be debited (a batch line is then never run again). */
  get charged(): boolean {
    return this.costed;
  }

  /**
   * A terminal frame that arrived after the answer ended (the client left): only what it says of
   * the cost matters. A retryable failure (a fallback's) publishes no usage: its hold goes back,
   * and what the failed attempt may cost is not charged.
   */
  settleFrame(frame: RawFrame, modelPrices: Prices): void {
    const end = frame.type === FRAME.done ? parsePayload(DoneSchema, frame.payload) : parsePayload(FrameErrorSchema, frame.payload);
    if (end && 'retryable' in end && end.retryable) {
      if (end.extra_cost) log.warn('client left during a fallback: the failed attempt is not charged', { request_id: this.requestId, cost: end.extra_cost });
      this.releaseSoon();
      return;
    }
    this.settle(end?.usage ? usageCost(this.free, modelPrices, end.usage, end.prices, end.extra_cost) : null);
  }
}
