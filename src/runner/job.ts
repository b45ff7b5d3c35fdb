import { type Prices, type PriceStrings, priceStrings, usageCostMicros } from '../billing/money.ts';
import { encodeFrame, type FrameError, type OutFrame } from '../bus/frames.ts';
import type { Job, UsageMessage } from '../bus/messages.ts';
import { asDeployment, type CatalogEntry, type Deployment } from '../catalog/catalog.ts';
import type { Logger } from '../log.ts';
import type { AdapterRegistry } from '../providers/registry.ts';
import { type AdapterEvent, isUpstreamError, newCall, type TokenUsage, type UpstreamCall, UpstreamError } from '../providers/types.ts';
import type { Span } from '../tracing/tracer.ts';
import { countsAgainstHealth, type DeploymentHealth, failoverWorthy } from './deployments.ts';
import type { Outbox } from './outbox.ts';
import type { UsagePublisher } from './usage-publisher.ts';

// One accepted job, from the upstream call to its last frame and its usage message: what the
// client is sent (frames, in order, on the job's reply subject) and what the tenant is billed.
// A job tries the model's deployments in the order its runner's health view gives, moving on after
// a failure before the first byte; whatever the failed attempts may cost is added to its one debit.

export type AbortWhy = 'cancel' | 'deadline' | 'drain';

/** One accepted job while it runs: the worker's sweeper sends its keepalives and enforces its deadline. */
export interface Running {
  ac: AbortController;
  pool: string;
  span: Span;
  why?: AbortWhy;
  deadline: number;
  lastSent: number;
  /** sends a keepalive frame (set while the upstream call runs) */
  keepalive?: () => void;
  done?: Promise<void>;
}

export interface JobCounters {
  accepted: number;
  completed: number;
  failed: number;
  cancelled: number;
  busy: number;
  invalid: number;
}

/** What a job needs from its worker. */
export interface JobContext {
  workerId: string;
  registry: AdapterRegistry;
  outbox: Outbox;
  usage: UsagePublisher;
  log: Logger;
  counters: JobCounters;
  health: DeploymentHealth;
  /** An attempt with another deployment or model still to try gives up when the vendor sends nothing for this long. */
  firstByteTimeoutMs: number;
  recordFirstToken(ms: number): void;
  onJobEnd?: (ms: number, outcome: UsageMessage['outcome']) => void;
}

const KEEPALIVE: OutFrame = { t: 'keepalive' };
/** a whole body goes to the front door in pieces well below NATS's max_payload */
const BODY_PIECE = 256 * 1024;

/** The vendor's counts, without the event's type (what a usage event and a done frame carry). */
function countsOf(ev: TokenUsage & { type?: string; estimated?: boolean }): TokenUsage {
  const u: TokenUsage = { prompt_tokens: ev.prompt_tokens, completion_tokens: ev.completion_tokens };
  if (ev.cached_tokens !== undefined) u.cached_tokens = ev.cached_tokens;
  if (ev.cache_write_tokens !== undefined) u.cache_write_tokens = ev.cache_write_tokens;
  if (ev.cache_write_1h_tokens !== undefined) u.cache_write_1h_tokens = ev.cache_write_1h_tokens;
  if (ev.reasoning_tokens !== undefined) u.reasoning_tokens = ev.reasoning_tokens;
  return u;
}

/** Our own cut of an attempt that waited too long for its first byte (another deployment or model is tried). */
const FIRST_BYTE = 'first_byte_timeout';

export function runJob(ctx: JobContext, job: Job, model: CatalogEntry, pool: string, acceptedAt: number, entry: Running): Promise<void> {
  return new JobRun(ctx, job, model, pool, acceptedAt, entry).run();
}

class JobRun {
  private seq = 0;
  private readonly first: { traceparent: string };
  private output = '';
  /** frames of output sent towards the client (text, reasoning and its signatures, tool calls, body pieces): after one, never a retry */
  private deltas = 0;
  private usage: TokenUsage | undefined;
  private promptUsage: TokenUsage | undefined;
  private estimated = false;
  private finish: string | undefined;
  private stopSequence: string | undefined;
  private failure: unknown;
  private call!: UpstreamCall;
  /** the deployment that answered, or the last one tried */
  private deployment!: Deployment;
  /** micro-BRL the failed attempts may cost (and the front door's earlier ones) */
  private extraCost: bigint;
  private firstEventAt: number | null = null;

  constructor(
    private readonly ctx: JobContext,
    private readonly job: Job,
    private readonly model: CatalogEntry,
    private readonly pool: string,
    private readonly acceptedAt: number,
    private readonly entry: Running,
  ) {
    // the first frame carries the job span's traceparent (the front door links it)
    this.first = { traceparent: entry.span.traceparent() };
    this.extraCost = BigInt(job.carry_cost ?? '0');
  }

  private send(frame: OutFrame): void {
    this.entry.lastSent = Date.now();
    this.ctx.outbox.publish(this.job.reply_to, encodeFrame(this.seq, frame), this.seq === 0 ? this.first : undefined);
    this.seq++;
  }

  private generated(): void {
    if (this.deltas++ === 0) this.ctx.recordFirstToken(Date.now() - this.acceptedAt);
  }

  private readonly onEvent = (ev: AdapterEvent) => {
    if (this.entry.why) return;
    this.firstEventAt ??= Date.now();
    switch (ev.type) {
      case 'delta':
        this.generated();
        this.output += ev.content;
        return this.send({ t: 'text', content: ev.content });
      case 'reasoning':
        this.generated();
        this.output += ev.content;
        return this.send({ t: 'extended', delta: { reasoning: ev.content } });
      case 'reasoning_signature':
        // not output the tenant is billed for, but a frame the client may already have: no retry after it
        this.generated();
        return this.send({ t: 'extended', delta: { reasoning_signature: ev.signature } });
      case 'redacted_reasoning':
        this.generated();
        return this.send({ t: 'extended', delta: { redacted_reasoning: ev.data } });
      case 'body':
        this.generated();
        for (let at = 0; at < ev.json.length; at += BODY_PIECE) this.send({ t: 'body', piece: ev.json.slice(at, at + BODY_PIECE) });
        return;
      case 'tool_calls':
        this.generated();
        // generated output too: counted in the estimate when the upstream gives no usage
        for (const c of ev.tool_calls) this.output += (c.function?.name ?? '') + (c.function?.arguments ?? '');
        return this.send({ t: 'extended', delta: { tool_calls: ev.tool_calls } });
      case 'prompt_usage':
        this.promptUsage = countsOf({ ...ev, completion_tokens: 0 });
        return;
      case 'usage':
        this.usage = countsOf(ev);
        this.estimated = ev.estimated ?? false;
        return;
      case 'finish':
        this.finish = ev.reason;
        this.stopSequence = ev.stop_sequence;
        return;
    }
  };

  async run(): Promise<void> {
    this.entry.keepalive = () => this.send(KEEPALIVE);
    try {
      await this.callDeployments();
    } finally {
      this.entry.keepalive = undefined;
    }
    if (!this.usage) await this.countUsage();
    const retryable = this.retryableFailure();
    const outcome = this.sendEnd(retryable);
    this.ctx.onJobEnd?.(Date.now() - this.acceptedAt, outcome);
    const usage = this.usage!;
    this.entry.span.setAttributes({
      'catraca.outcome': outcome,
      'catraca.prompt_tokens': usage.prompt_tokens,
      'catraca.completion_tokens': usage.completion_tokens,
      'catraca.estimated': this.estimated,
      'catraca.deployment': this.deployment.name,
    });
    if (outcome === 'error') this.entry.span.setStatus('error');
    // a token count is free (the front door released its zero hold), and a failure the front door
    // retries on another model is settled with that model's attempt
    if (this.job.api === 'count_tokens' || retryable) return;
    this.publishUsage(outcome);
  }

  /** Tries the deployments in order until one serves the job or fails after its first byte. */
  private async callDeployments(): Promise<void> {
    const country = this.job.data_country;
    const plan = this.ctx.health.plan(this.model, this.job.routing).filter((d) => !country || d.country === country);
    if (plan.length === 0 && country) {
      // never sent abroad: a key kept in a country is refused rather than served elsewhere
      this.deployment = this.model.deployments[0];
      this.call = newCall(this.job, this.model);
      const there = this.model.deployments.filter((d) => d.country === country).length;
      this.failure = new UpstreamError(
        403,
        'data_residency_unavailable',
        there === 0
          ? `This key's requests must stay in ${country}, and ${this.model.id} has no deployment there.`
          : `This key's requests must stay in ${country}, and every deployment of ${this.model.id} there is unavailable now; it is not sent elsewhere.`,
      );
      return;
    }
    if (plan.length === 0) {
      this.deployment = this.model.deployments[0];
      this.call = newCall(this.job, this.model);
      const retry = this.ctx.health.retryAfterS(this.model);
      this.failure = new UpstreamError(
        503,
        'upstream_cooling_down',
        `Every deployment of ${this.model.id} is cooling down after failures; retry after ${retry} s.`,
        retry,
      );
      return;
    }
    for (let i = 0; i < plan.length; i++) {
      const more = i < plan.length - 1 || this.job.fallback === true;
      const outcome = await this.attempt(plan[i], more);
      if (outcome !== 'next') return;
    }
  }

  /** One deployment: 'done' when it served (or failed after its first byte, or the job was stopped), 'next' to try another. */
  private async attempt(d: Deployment, more: boolean): Promise<'done' | 'next'> {
    this.deployment = d;
    this.call = newCall(this.job, asDeployment(this.model, d));
    this.failure = undefined;
    this.usage = this.promptUsage = undefined;
    this.firstEventAt = null;
    // a token count says nothing about how a deployment serves: it never moves its health
    const health = this.job.api === 'count_tokens' ? undefined : this.ctx.health;
    health?.attempting(this.model.id, d);
    const adapter = this.ctx.registry.forProtocol(d.protocol);
    const attempt = new AbortController();
    const stop = () => attempt.abort(this.entry.ac.signal.reason);
    this.entry.ac.signal.addEventListener('abort', stop, { once: true });
    if (this.entry.ac.signal.aborted) stop();
    // with somewhere else to go, a vendor that sends nothing for too long is left for it
    const firstByte = more ? setTimeout(() => this.firstEventAt === null && attempt.abort(new Error(FIRST_BYTE)), this.ctx.firstByteTimeoutMs) : undefined;
    const started = Date.now();
    try {
      await adapter.stream(this.call, attempt.signal, this.onEvent);
    } catch (err) {
      this.failure = attempt.signal.reason?.message === FIRST_BYTE && !this.entry.why ? firstByteTimeout(this.ctx.firstByteTimeoutMs) : err;
    } finally {
      clearTimeout(firstByte);
      this.entry.ac.signal.removeEventListener('abort', stop);
    }
    if (this.failure === undefined) {
      const ttft = this.firstEventAt === null ? null : this.firstEventAt - started;
      const usage = this.usage as TokenUsage | undefined; // set by onEvent during the call
      health?.succeeded(this.model.id, d, ttft, usage?.completion_tokens ?? 0, Date.now() - (this.firstEventAt ?? started));
      return 'done';
    }
    const worthy = !this.entry.why && this.deltas === 0 && failoverWorthy(this.failure);
    // a prompt too long for this deployment says nothing about its health (one tenant's long
    // prompts must not open its circuit for everyone), nor does a client's bad request, a cancel
    // or a failure after the first byte: those only end a half-open probe
    if (worthy && countsAgainstHealth(this.failure)) health?.failed(this.model.id, d, this.failure);
    else health?.released(this.model.id, d);
    if (!worthy || !more) return 'done';
    this.ctx.log.info('deployment failed before its first byte; trying the next', {
      request_id: this.job.request_id,
      model: this.model.id,
      deployment: d.name,
      code: isUpstreamError(this.failure) ? this.failure.code : 'error',
    });
    await this.carryFailedAttempt(d);
    return 'next';
  }

  /** What a failed attempt may still cost (the vendor had the prompt when we cut it), carried into the job's one debit. */
  private async carryFailedAttempt(d: Deployment): Promise<void> {
    const timedOut = isUpstreamError(this.failure) && this.failure.code === 'upstream_timeout';
    if (!this.call.accepted && !(this.call.sent && timedOut)) return;
    const counted = await this.count(this.call, '');
    this.extraCost += usageCostMicros(counted.usage, this.pricesOf(d));
  }

  /** Whether the failure is one the front door will retry on another model (it has more, and nothing reached the client). */
  private retryableFailure(): boolean {
    return this.job.fallback === true && this.failure !== undefined && !this.entry.why && this.deltas === 0 && failoverWorthy(this.failure);
  }

  private async count(call: UpstreamCall, output: string): Promise<{ usage: TokenUsage; estimated: boolean }> {
    try {
      return await this.ctx.registry.forProtocol(call.model.protocol).countUsage(call, output);
    } catch (err) {
      this.ctx.log.error('token count failed', { request_id: this.job.request_id, err: err as Error });
      return { usage: { prompt_tokens: 0, completion_tokens: this.deltas }, estimated: true };
    }
  }

  // Billing rule: the upstream's usage when it gave one. Otherwise the adapter's count of the
  // prompt and of what was generated, whenever the vendor may have billed the prompt: it accepted
  // the request, or it had the request when we cut it (a cancel before the first token included).
  // A request the vendor refused or never received costs nothing.
  private async countUsage(): Promise<void> {
    const why = this.entry.why;
    const ok = !why && this.failure === undefined;
    const ourCut = why !== undefined || (isUpstreamError(this.failure) && this.failure.code === 'upstream_timeout');
    if (ok || this.deltas > 0 || this.call.accepted || (this.call.sent && ourCut)) {
      const counted = await this.count(this.call, this.output);
      const prompt: TokenUsage | undefined = this.promptUsage;
      this.usage = prompt !== undefined ? { ...prompt, completion_tokens: counted.usage.completion_tokens } : counted.usage;
      this.estimated = counted.estimated;
    } else {
      this.usage = { prompt_tokens: 0, completion_tokens: 0 };
    }
  }

  /** The job's terminal frame; returns its outcome. */
  private sendEnd(retryable: boolean): UsageMessage['outcome'] {
    const { counters, log } = this.ctx;
    const usage = this.usage!;
    const billing = this.billing();
    const why = this.entry.why;
    if (!why && this.failure === undefined) {
      counters.completed++;
      const done = { finish_reason: this.finish ?? 'stop', usage, estimated: this.estimated, ...billing };
      this.send({ t: 'done', done: this.stopSequence !== undefined ? { ...done, stop_sequence: this.stopSequence } : done });
      return 'completed';
    }
    if (why === 'cancel') {
      counters.cancelled++;
      this.send({ t: 'error', error: { status: 499, code: 'request_cancelled', message: 'The request was cancelled by the client.', usage, ...billing } });
      return 'cancelled';
    }
    counters.failed++;
    if (why === 'deadline') {
      this.send({
        t: 'error',
        error: { status: 504, code: 'upstream_timeout', message: 'The request did not finish before its deadline.', usage, ...billing },
      });
    } else if (why === 'drain') {
      this.send({
        t: 'error',
        error: { status: 503, code: 'worker_shutting_down', message: 'The worker serving this request shut down; retry.', usage, ...billing },
      });
    } else if (isUpstreamError(this.failure)) {
      const f = this.failure;
      const error: FrameError = { status: f.status, code: f.code, message: f.message, usage, ...billing };
      if (f.retryAfter !== undefined) error.retry_after = f.retryAfter;
      if (retryable) error.retryable = true;
      this.send({ t: 'error', error });
      log.info('upstream error', { request_id: this.job.request_id, pool: this.pool, status: f.status, code: f.code, tokens: this.deltas });
    } else {
      log.error('job failed unexpectedly', { request_id: this.job.request_id, pool: this.pool, err: this.failure as Error });
      this.send({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'The upstream call failed unexpectedly.', usage, ...billing } });
    }
    return 'error';
  }

  /** What a deployment bills this job at: its batch prices for a line of a batch, else its prices. */
  private pricesOf(d: Deployment): Prices {
    return this.job.batch ? d.batchPrices : d.prices;
  }

  /** The prices the usage is billed at (the deployment's, when not the job's) and the carried cost. */
  private billing(): { prices?: PriceStrings; extra_cost?: string } {
    const out: { prices?: PriceStrings; extra_cost?: string } = {};
    if (this.deployment.id !== 'primary') out.prices = priceStrings(this.pricesOf(this.deployment));
    if (this.extraCost > 0n) out.extra_cost = this.extraCost.toString();
    return out;
  }

  private publishUsage(outcome: UsageMessage['outcome']): void {
    const { job } = this;
    const { id: _id, fingerprint: _fp, ...jobPrices } = job.model;
    this.ctx.usage.publish(
      this.pool,
      {
        v: 1,
        request_id: job.request_id,
        tenant_id: job.tenant_id,
        key_id: job.key_id,
        model: job.model.id,
        pool: this.pool,
        ...(this.deployment.id === 'primary' ? jobPrices : { ...priceStrings(this.pricesOf(this.deployment)), deployment: this.deployment.id }),
        ...this.usage!,
        ...(job.api && job.api !== 'chat' ? { api: job.api } : {}),
        ...(job.route ? { route: job.route } : {}),
        ...(job.end_user ? { end_user: job.end_user } : {}),
        ...(this.deployment.id === 'primary' ? {} : { ran_on: this.deployment.name }),
        ...(this.deployment.region ? { region: this.deployment.region } : {}),
        ...(this.deployment.country ? { country: this.deployment.country } : {}),
        ...(job.batch_id ? { batch_id: job.batch_id } : {}),
        ...(this.extraCost > 0n ? { extra_cost: this.extraCost.toString() } : {}),
        estimated: this.estimated,
        outcome,
        ...(job.hold ? { hold: job.hold } : {}),
        ended_at: Date.now(),
        worker: this.ctx.workerId,
      },
      this.entry.span.traceparent(),
    );
  }
}

function firstByteTimeout(ms: number): UpstreamError {
  return new UpstreamError(504, 'upstream_timeout', `The upstream provider sent nothing within ${ms} ms.`);
}
