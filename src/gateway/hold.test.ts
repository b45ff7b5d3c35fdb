import { describe, expect, it } from 'vitest';
import type { AdmitInput, Admitted } from '../billing/admission.ts';
import type { AdmitResult } from '../billing/ledger.ts';
import { encodeFrame, type OutFrame, splitFrame } from '../bus/frames.ts';
import { CatracaError } from '../errors.ts';
import { type AdmitContext, admissionError, HeldRequest, type HoldAdmission, usageCost } from './hold.ts';

// A request's hold from admission to its one end, against a recording admission: every way the
// hold can end calls admission exactly once (release, or finish with the cost), and never again.

class RecordingAdmission implements HoldAdmission {
  calls: string[] = [];
  answer: Partial<AdmitResult> & { hold?: string } = {};
  failRelease = false;

  async admit(input: AdmitInput): Promise<Admitted> {
    this.calls.push(`admit ${input.requestId}`);
    return {
      status: 'ok',
      held: input.max,
      available: 1_000_000n,
      rl_limit: null,
      rl_remaining: null,
      rl_reset_ms: null,
      hold: input.requestId,
      ...this.answer,
    };
  }

  finish(requestId: string, cost: bigint | null): void {
    this.calls.push(`finish ${requestId} ${cost}`);
  }

  async release(requestId: string): Promise<void> {
    this.calls.push(`release ${requestId}`);
    if (this.failRelease) throw new Error('connection refused');
  }
}

const PRICES = { input: 2_000_000n, output: 8_000_000n }; // micro-BRL per 1M tokens: 2 and 8 per token
const input: AdmitInput = { requestId: 'gen-1', tenantId: 't1', keyId: 'k1', min: 100n, max: 500n, ttlMs: 60_000, leasable: true };

function context(over: Partial<AdmitContext> = {}): AdmitContext & { revoked: number } {
  const ctx = {
    revoked: 0,
    headers: {},
    primary: { inputTokens: 10, wanted: 50, holdPrices: PRICES },
    rateTokens: 53,
    endUser: 'u-1',
    portalUrl: 'https://portal.example',
    onKeyRevoked() {
      ctx.revoked++;
    },
    ...over,
  };
  return ctx;
}

async function admitted(free = false, answer: RecordingAdmission['answer'] = {}) {
  const admission = new RecordingAdmission();
  admission.answer = answer;
  const held = new HeldRequest(admission, 'gen-1', free);
  await held.admit(input, context());
  return { admission, held };
}

const frame = (f: OutFrame) => splitFrame(Buffer.from(encodeFrame(3, f)))!;

describe('HeldRequest', () => {
  it('admitted: the hold is the one admission names (a lease id), and the amount held is returned', async () => {
    const admission = new RecordingAdmission();
    admission.answer = { hold: 'lease_d1_ab_7', held: 420n };
    const held = new HeldRequest(admission, 'gen-1', false);
    expect(held.id).toBe('');
    expect(await held.admit(input, context())).toBe(420n);
    expect(held.id).toBe('lease_d1_ab_7');
    expect(held.open).toBe(true);
    expect(admission.calls).toEqual(['admit gen-1']);
  });

  it('refused: the error is thrown, nothing is held, and nothing is ever given back or counted', async () => {
    const admission = new RecordingAdmission();
    admission.answer = { status: 'insufficient_balance', held: 0n, available: 30n };
    const held = new HeldRequest(admission, 'gen-1', false);
    const err = await held.admit(input, context()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CatracaError);
    expect((err as CatracaError).status).toBe(402);
    expect(held.open).toBe(false);
    await held.release();
    await held.releaseUnsent();
    held.settle(10n);
    held.settleFrame(frame({ t: 'done', done: { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1 }, estimated: false } }), PRICES);
    expect(admission.calls).toEqual(['admit gen-1']);
  });

  it('a free route is counted by admission and its (zero) hold goes back at once, once', async () => {
    const { admission, held } = await admitted(true);
    expect(held.id).toBe('');
    expect(held.open).toBe(false);
    await held.release();
    await held.releaseUnsent();
    held.settle(0n);
    expect(admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it('released twice (and soon, and unsent): admission is told once', async () => {
    const { admission, held } = await admitted();
    await held.release();
    await held.release();
    held.releaseSoon();
    await held.releaseUnsent();
    held.settle(5n);
    expect(admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it('settled: the cost goes to admission once; a later release or terminal frame does nothing', async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    held.settle(60n);
    held.settle(null);
    await held.release();
    held.settleFrame(frame({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'x', retryable: true } }), PRICES);
    expect(admission.calls).toEqual(['admit gen-1', 'finish gen-1 60']);
  });

  it('settled with an unknown end: null (the worst case stays counted)', async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    held.settle(null);
    expect(admission.calls).toEqual(['admit gen-1', 'finish gen-1 null']);
  });

  it('a job out with a worker is not given back when the request ends: it settles through metering', async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    await held.releaseUnsent();
    expect(admission.calls).toEqual(['admit gen-1']);
    expect(held.open).toBe(true);
  });

  it("a job no worker took (or that failed as retryable) is the request's again: given back when the request ends", async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    held.jobReturned();
    await held.releaseUnsent();
    await held.releaseUnsent();
    expect(admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it('a release admission could not take rejects, and is not tried again (the hold expires)', async () => {
    const { admission, held } = await admitted();
    admission.failRelease = true;
    await expect(held.release()).rejects.toThrow('connection refused');
    await held.release();
    held.releaseSoon();
    held.settle(1n);
    expect(admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it('releaseSoon: a failure is logged, not thrown', async () => {
    const { admission, held } = await admitted();
    admission.failRelease = true;
    held.releaseSoon();
    await new Promise((r) => setImmediate(r));
    expect(admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it("a terminal frame after the answer ended: done counts its exact cost (the deployment's prices, the carried cost)", async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    // 10 × 3 + 5 × 12 = 90, + 7 carried
    held.settleFrame(
      frame({
        t: 'done',
        done: {
          finish_reason: 'stop',
          usage: { prompt_tokens: 10, completion_tokens: 5 },
          estimated: false,
          prices: { input_price: '3000000', output_price: '12000000' },
          extra_cost: '7',
        },
      }),
      PRICES,
    );
    expect(admission.calls).toEqual(['admit gen-1', 'finish gen-1 97']);
  });

  it('a terminal frame after the answer ended: an error with usage counts it, without usage null, a retryable one gives the hold back', async () => {
    const withUsage = await admitted();
    withUsage.held.jobSent();
    withUsage.held.settleFrame(
      frame({ t: 'error', error: { status: 499, code: 'cancelled', message: 'x', usage: { prompt_tokens: 10, completion_tokens: 2 } } }),
      PRICES,
    );
    expect(withUsage.admission.calls).toEqual(['admit gen-1', 'finish gen-1 36']);

    const without = await admitted();
    without.held.jobSent();
    without.held.settleFrame(frame({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'x' } }), PRICES);
    expect(without.admission.calls).toEqual(['admit gen-1', 'finish gen-1 null']);

    const retryable = await admitted();
    retryable.held.jobSent();
    retryable.held.settleFrame(frame({ t: 'error', error: { status: 503, code: 'upstream_error', message: 'x', retryable: true, extra_cost: '20' } }), PRICES);
    await new Promise((r) => setImmediate(r));
    expect(retryable.admission.calls).toEqual(['admit gen-1', 'release gen-1']);
  });

  it('a malformed terminal frame: the end is unknown (null)', async () => {
    const { admission, held } = await admitted();
    held.jobSent();
    held.settleFrame(splitFrame(Buffer.from('d3\n{"finish_reason":1}'))!, PRICES);
    expect(admission.calls).toEqual(['admit gen-1', 'finish gen-1 null']);
  });
});

describe('admissionError', () => {
  const result = (over: Partial<AdmitResult>): AdmitResult => ({
    status: 'ok',
    held: 0n,
    available: 0n,
    rl_limit: null,
    rl_remaining: null,
    rl_reset_ms: null,
    ...over,
  });

  it('ok: none', () => {
    expect(admissionError(result({}), context())).toBeNull();
  });

  it('each refusal as its status and code', () => {
    const cases: Array<[Partial<AdmitResult>, number, string]> = [
      [{ status: 'rate_limited', rl_limit: 10, rl_remaining: 0, rl_reset_ms: 2500n }, 429, 'rate_limit_exceeded'],
      [{ status: 'concurrency_limited', rl_limit: 4 }, 429, 'concurrency_limit_exceeded'],
      [{ status: 'tpm_limited', rl_limit: 1000, rl_remaining: 10, rl_reset_ms: 30_000n }, 429, 'tpm_limit_exceeded'],
      [{ status: 'end_user_limit', available: 12n }, 402, 'end_user_limit_exceeded'],
      [{ status: 'tenant_suspended' }, 403, 'tenant_suspended'],
      [{ status: 'key_revoked' }, 401, 'revoked_api_key'],
      [{ status: 'insufficient_balance', available: 30n }, 402, 'insufficient_balance'],
      [{ status: 'key_limit', available: 30n }, 402, 'key_limit_exceeded'],
    ];
    for (const [over, status, code] of cases) {
      const e = admissionError(result(over), context());
      expect([over.status, e?.status, e?.code]).toEqual([over.status, status, code]);
    }
  });

  it('rate limited: retry-after in whole seconds, and the x-ratelimit-* headers already set', () => {
    const ctx = context({ headers: { 'x-ratelimit-limit': '10' } });
    const e = admissionError(result({ status: 'rate_limited', rl_limit: 10, rl_remaining: 0, rl_reset_ms: 2500n }), ctx)!;
    expect(e.headers).toEqual({ 'retry-after': '3', 'x-ratelimit-limit': '10' });
  });

  it('tokens per minute: what the request counts, against what remains', () => {
    const e = admissionError(result({ status: 'tpm_limited', rl_limit: 1000, rl_remaining: 10, rl_reset_ms: 30_000n }), context())!;
    expect(e.message).toBe(
      "This request counts 53 tokens (its prompt estimate and max_tokens) against this key's limit of 1000 tokens per minute, of which 10 remain; retry after 30 s, or ask for fewer max_tokens.",
    );
    expect(e.headers).toEqual({ 'retry-after': '30' });
  });

  it('key revoked: the key is forgotten', () => {
    const ctx = context();
    admissionError(result({ status: 'key_revoked' }), ctx);
    expect(ctx.revoked).toBe(1);
  });

  it('insufficient balance: what the balance affords, and where to top up', () => {
    // 10 input tokens × 2 = 20 µR$; 30 µR$ left: 10 / 8 → 1 output token
    const e = admissionError(result({ status: 'insufficient_balance', available: 30n }), context())!;
    expect(e.message).toBe(
      'This request requires more credits, or fewer max_tokens. You requested up to 50 tokens, but can only afford 1 with your available balance of R$ 0.000030. Top up at https://portal.example.',
    );
  });
});

describe('usageCost', () => {
  it("the model's prices unless the frame names its deployment's, plus what failed attempts carry; nothing on a free route", () => {
    const usage = { prompt_tokens: 10, completion_tokens: 5 };
    expect(usageCost(false, PRICES, usage)).toBe(60n);
    expect(usageCost(false, PRICES, usage, { input_price: '1000000', output_price: '1000000' }, '4')).toBe(19n);
    expect(usageCost(true, PRICES, usage, undefined, '4')).toBe(0n);
  });
});
