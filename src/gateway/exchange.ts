import { randomFillSync } from 'node:crypto';
import type { NatsConnection } from 'nats';
import type { Admission } from '../billing/admission.ts';
import { affordableOutputTokens, type Prices, priceStrings } from '../billing/money.ts';
import { DoneSchema, ExtendedDeltaSchema, FRAME, type FrameError, FrameErrorSchema, parsePayload, payloadText, type RawFrame } from '../bus/frames.ts';
import { encode, type Job } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import type { Catalog, CatalogEntry } from '../catalog/catalog.ts';
import type { Config } from '../config.ts';
import { type ApiKeyRecord, hasFinerLimits } from '../db/keys.ts';
import type { Db } from '../db/pool.ts';
import { CatracaError, errors } from '../errors.ts';
import { createLogger } from '../log.ts';
import { parseJsonObject } from '../protocols/request-body.ts';
import { checkStoredText } from '../protocols/stored-text.ts';
import type { Ending, ParsedRequest, Protocol } from '../protocols/types.ts';
import type { JobRunner } from '../runner/runner.ts';
import type { Span, Tracer } from '../tracing/tracer.ts';
import type { Dispatcher, LateAnswer, Ticket } from './dispatcher.ts';
import { type Candidate, candidateOf, extraAttempts, holdFor } from './candidates.ts';
import { HeldRequest, usageCost } from './hold.ts';
import type { KeyCache } from './key-cache.ts';
import type { GatewayMetrics } from './metrics.ts';
import { Reply } from './reply.ts';
import type { ResponseState } from './respond.ts';
import type { StreamRouter } from './stream-router.ts';

const log = createLogger('gateway');

/** What every exchange needs from its front door. */
export interface ExchangeDeps {
  config: Config;
  /** for a protocol's `prepare` (stored conversations) */
  db: Db;
  nc: NatsConnection;
  keys: KeyCache;
  catalog: Catalog;
  router: StreamRouter;
  portalUrl?: string;
  metrics?: GatewayMetrics;
  admission: Admission;
  dispatcher: Dispatcher;
  /** The door's in-process pools (GATEWAY_LOCAL_POOLS), tried before the pool's worker processes. */
  local?: JobRunner;
  /** One span per request; its traceparent goes to the worker with the job. */
  tracer?: Tracer;
  /** Called once per request with its final HTTP status (metrics). */
  onFinish?: (status: number, ttfbMs: number | null, startedAt: number, route: string) => void;
}

// 80 random bits per id, cut from a pool filled 400 ids at a time (one call into the CSPRNG each)
const idPool = Buffer.alloc(4000);
let idAt = idPool.length;

export function newRequestId(): string {
  if (idAt === idPool.length) {
    randomFillSync(idPool);
    idAt = 0;
  }
  const random = idPool.toString('hex', idAt, idAt + 10);
  idAt += 10;
  return `gen-${Date.now().toString(36)}${random}`;
}

const SPAN_NAMES: Record<string, string> = { chat: 'chat.completions' };

/**
 * One request of any protocol from admission to its last byte: the same key checks, worst-case
 * hold, dispatch, relay and billing for every route; the protocol reads the request and its
 * encoder writes the answer (`Reply`). The hold (`HeldRequest`) is settled by the metering
 * consumer when the worker's usage arrives, or given back here when no worker has the job.
 */
export class Exchange<R extends ParsedRequest = ParsedRequest> {
  private workerId?: string;
  private finished = false;
  private upstreamDone = false; // terminal frame received
  private cancelSent = false;
  private readonly held: HeldRequest;
  private readonly reply: Reply;
  private ticket?: Ticket;
  private model!: CatalogEntry;
  private prices!: Prices;
  private key!: ApiKeyRecord;
  private req!: R;
  /** the models that may answer, in order, and which one is being tried */
  private candidates: Candidate[] = [];
  private current = 0;
  /** the output cap each candidate's job pays for */
  private readonly maxTokens: number[] = [];
  /** micro-BRL that failed candidates may cost (carried into the one debit) */
  private carried = 0n;
  private firstByteAt: number | null = null;
  private readonly startedAt = Date.now();
  private readonly span?: Span;

  /**
   * `traceparent`: the client's header (W3C). Its context is a link of this request's span, which
   * starts a new trace of ours: a client can neither keep its request out of our traces (flags 00)
   * nor splice it into another trace. `batchId`: set for a line of that batch (src/batch/runner.ts), held,
   * dispatched and billed at the batch prices, its ledger row recording the batch.
   */
  constructor(
    private readonly deps: ExchangeDeps,
    private readonly protocol: Protocol<R>,
    private readonly s: ResponseState,
    traceparent?: string,
    private readonly batchId?: string,
  ) {
    this.held = new HeldRequest(deps.admission, s.requestId, protocol.free === true);
    this.reply = new Reply(
      s,
      protocol,
      deps.config.MAX_CLIENT_BUFFER_BYTES,
      () => {
        this.cancelUpstream();
        this.finish(200);
      },
      deps.metrics,
    );
    this.span = deps.tracer?.startSpan(SPAN_NAMES[protocol.name] ?? protocol.name, {
      links: [traceparent],
      kind: 'server',
      attributes: { 'http.request.method': 'POST', 'url.path': protocol.path, 'catraca.request_id': s.requestId },
    });
  }

  /** Whether this request's worker reported a cost for it (it will be debited). */
  get charged(): boolean {
    return this.held.charged;
  }

  /** uWS onAborted: the client went away. */
  aborted(): void {
    this.s.aborted = true;
    this.ticket?.cancel(); // a job still waiting for a worker never reaches one
    this.reply.aborted();
    this.cancelUpstream();
    this.finish(499);
  }

  async run(rawBody: Buffer, authenticated: Promise<ApiKeyRecord>): Promise<void> {
    try {
      const key = await authenticated;
      const req = this.protocol.parse(parseJsonObject(rawBody));
      checkStoredText(req, this.protocol.endUserParam ?? 'user');
      await this.protocol.prepare?.(req, { requestId: this.s.requestId, key, db: this.deps.db, config: this.deps.config });
      this.key = key;
      this.req = req;
      this.candidates = await this.resolveCandidates(key, req);
      if (this.s.aborted) return;
      this.reply.streaming = req.stream;
      await this.admit(key);
      if (this.s.aborted) return await this.held.releaseUnsent();
      await this.dispatchCandidate(0);
    } catch (err) {
      await this.failed(err);
    }
  }

  /**
   * The pipeline threw: the error answers (if the client is still there), and a hold no worker has
   * goes back first, so that a client that sees the answer sees its balance whole.
   */
  private async failed(err: unknown): Promise<void> {
    try {
      await this.held.releaseUnsent();
    } catch (releaseErr) {
      log.warn('hold release failed', { request_id: this.s.requestId, err: releaseErr });
    }
    this.fail(err);
  }

  /**
   * The models that may answer, in order: the one the request names (an alias resolved), then its
   * fallbacks (OpenRouter's `models`). Each must exist, be one the key may use and the protocol can
   * serve, and take the request's fields: otherwise the answer names it, before anything is held.
   */
  private async resolveCandidates(key: ApiKeyRecord, req: R): Promise<Candidate[]> {
    const names = [req.model, ...(req.fallbacks ?? [])];
    const seen = new Set<string>();
    const out: Candidate[] = [];
    for (const name of names) {
      const model = await this.deps.catalog.resolve(name);
      if (!model) throw errors.modelNotFound(name);
      if (key.models && !key.models.includes(model.id)) throw errors.modelNotAllowed(model.id);
      if (model.kind !== this.protocol.kind) throw errors.wrongModelKind(model.id, model.kind, this.protocol.path);
      const refused = this.protocol.check(req, model);
      if (refused) throw errors.badRequest(refused.message, refused.param, refused.code);
      if (!routable(model, req.routing)) throw errors.noDeploymentMatches(model.id);
      // a key kept in a country is refused here, before anything is held, when the catalog has no
      // deployment there at all; the worker still refuses when those it has are all unavailable now
      if (key.data_country && !model.deployments.some((d) => d.country === key.data_country)) throw errors.dataResidencyUnavailable(model.id, key.data_country);
      if (seen.has(model.id)) continue;
      seen.add(model.id);
      const inputTokens = this.protocol.free ? 0 : this.protocol.inputBound(req, model);
      out.push(
        candidateOf(model, this.protocol.outputCap(req), inputTokens, this.protocol.free === true, out.length === 0, req.routing, this.batchId !== undefined),
      );
    }
    return out;
  }

  /** Reserves the worst case; sets the output cap each candidate's job pays for. */
  private async admit(key: ApiKeyRecord): Promise<void> {
    const { min, max } = holdFor(this.candidates);
    const primary = this.candidates[0];
    const admitStarted = performance.now();
    const held = await this.held.admit(
      {
        requestId: this.s.requestId,
        tenantId: key.tenant_id,
        keyId: key.id,
        min,
        max,
        ttlMs: this.deps.config.REQUEST_TIMEOUT_MS + this.deps.config.HOLD_GRACE_MS,
        leasable: key.rate_limit_requests === null && !hasFinerLimits(key),
        ...(hasFinerLimits(key) ? { limited: { tokens: this.rateTokens, endUser: this.req.endUser ?? null } } : {}),
      },
      {
        headers: this.reply.headers,
        primary,
        rateTokens: this.rateTokens,
        endUser: this.req.endUser,
        portalUrl: this.deps.portalUrl,
        onKeyRevoked: () => this.deps.keys.invalidate(key.id),
        onAnswer: () => this.deps.metrics?.admitted(performance.now() - admitStarted),
      },
    );
    for (const c of this.candidates) this.maxTokens.push(c.requested ?? c.wanted);
    // one candidate with no cap asked for runs with what the hold could cover, less what its
    // failed attempts on other deployments may carry
    if (this.candidates.length === 1 && primary.requested === null && !this.protocol.free) {
      const budget = held - extraAttempts(primary);
      this.maxTokens[0] = Math.max(1, affordableOutputTokens(budget, primary.inputTokens, primary.holdPrices, primary.wanted));
    }
  }

  /** Tokens this request counts against its key's tokens-per-minute limit: none for a free one (a token count generates nothing). */
  private get rateTokens(): number {
    return this.protocol.free ? 0 : rateTokens(this.candidates);
  }

  private newJob(key: ApiKeyRecord, req: R, maxTokens: number): Job {
    const { api, body } = this.protocol.job(req, this.model);
    const last = this.current === this.candidates.length - 1;
    return {
      v: 1,
      ...(api === 'chat' ? {} : { api }),
      request_id: this.s.requestId,
      tenant_id: key.tenant_id,
      key_id: key.id,
      model: { id: this.model.id, fingerprint: this.model.fingerprint, ...priceStrings(this.prices) },
      body,
      hold: this.held.id,
      max_tokens: maxTokens,
      ...(req.routing ? { routing: req.routing } : {}),
      ...(key.data_country ? { data_country: key.data_country } : {}),
      ...(last ? {} : { fallback: true }),
      ...(this.carried > 0n ? { carry_cost: this.carried.toString() } : {}),
      ...(this.protocol.name === 'chat' ? {} : { route: this.protocol.name }),
      ...(req.endUser ? { end_user: req.endUser } : {}),
      ...(this.batchId !== undefined ? { batch: true, batch_id: this.batchId } : {}),
      reply_to: this.deps.router.replySubject(this.s.requestId),
      deadline: Date.now() + this.deps.config.REQUEST_TIMEOUT_MS,
    };
  }

  /** Sends the request to candidate `i`. */
  private async dispatchCandidate(i: number): Promise<void> {
    this.current = i;
    const c = this.candidates[i];
    this.model = c.model;
    this.prices = c.prices;
    this.workerId = undefined;
    this.upstreamDone = false;
    this.cancelSent = false;
    await this.dispatch(this.key, this.req, this.maxTokens[i]);
  }

  /** Whether another model may still answer (OpenRouter's `models`). */
  private get hasNext(): boolean {
    return this.current < this.candidates.length - 1;
  }

  /** The failed candidate sent nothing to the client and another may answer: try it, carrying what the failed one may cost. */
  private retryNext(why: string, carry?: string): void {
    log.info('model failed before its first byte; trying the next', { request_id: this.s.requestId, model: this.model.id, code: why });
    if (carry) this.carried = BigInt(carry);
    void this.dispatchCandidate(this.current + 1).catch((err) => this.failed(err));
  }

  private async dispatch(key: ApiKeyRecord, req: R, maxTokens: number): Promise<void> {
    const job = this.newJob(key, req, maxTokens);
    this.reply.encoder = this.protocol.encoder(
      { requestId: this.s.requestId, model: this.model.id, created: Math.floor(this.startedAt / 1000), streaming: this.reply.streaming },
      req,
    );
    this.deps.router.register(this.s.requestId, {
      onFrame: (frame) => this.onFrame(frame),
      onFailure: (err) => {
        this.held.settle(null); // the end was never seen: its worst case stays counted
        this.ticket?.cancel(); // a job still waiting for a worker never reaches one
        this.cancelUpstream();
        this.fail(err);
      },
      onTrace: (traceparent) => this.span?.addLink(traceparent),
    });
    this.span?.setAttributes({ 'catraca.tenant_id': key.tenant_id, 'catraca.model': this.model.id, 'catraca.pool': this.model.pool });
    const local = this.deps.local?.serves(this.model.pool) ? this.deps.local : undefined;
    // this door's own lane: no NATS request, frames straight to the router; when it is full or
    // draining the job goes to the pool's worker processes, or waits for either
    const offerLocal =
      local &&
      (() => {
        const ack = local.offer(job, this.model, this.model.pool, this.span?.traceparent());
        return ack.ok ? ack.worker : null;
      });
    this.held.jobSent(); // from the first offer on, a worker may have it
    const taken = offerLocal?.();
    if (taken) {
      this.workerId = taken;
      this.deps.router.started(this.s.requestId);
      return;
    }
    await this.sendToWorkers(key, job, offerLocal);
  }

  /** The job over NATS to the pool's worker processes (or waiting in the door for a slot). */
  private async sendToWorkers(key: ApiKeyRecord, job: Job, offerLocal: (() => string | null) | undefined): Promise<void> {
    const payload = encode(job);
    // NATS refuses a message over the server's max_payload (1 MiB by default, below MAX_BODY_BYTES):
    // the job never leaves, so its hold goes back at once and the client gets a 413, not a 500.
    const maxPayload = this.deps.nc.info?.max_payload;
    if (maxPayload !== undefined && payload.byteLength > maxPayload) {
      this.held.jobReturned();
      this.deps.router.unregister(this.s.requestId);
      throw errors.jobTooLarge(maxPayload);
    }
    const headers = this.span && { traceparent: this.span.traceparent() };
    this.ticket = this.deps.dispatcher.submit(this.model.pool, key.tenant_id, payload, headers, offerLocal, (late) => this.lateAnswer(late));
    try {
      const { worker } = await this.ticket.result;
      this.workerId = worker;
      this.deps.router.started(this.s.requestId);
      // the client left, or the response already ended, while the job was on its way: stop it there
      if (this.s.aborted || this.finished) this.cancelUpstream();
    } catch (err) {
      const e = err as CatracaError;
      this.deps.router.unregister(this.s.requestId);
      if (e.code === 'upstream_timeout') {
        // No worker acknowledged in time: the client gets 504, and the hold waits for what the
        // worker that has the job, if any, does with it (`lateAnswer`).
        throw e;
      }
      // no worker took the job: its hold goes back when the request ends (`failed`), or the next model keeps it
      this.held.jobReturned();
      if (e.code === 'no_worker_available') this.deps.metrics?.noResponders();
      if (this.hasNext && !this.s.aborted && (e.code === 'no_worker_available' || e.code === 'overloaded')) {
        // nothing reached a vendor: the next model keeps the hold
        return this.retryNext(e.code);
      }
      if (e.code === 'worker_refused') {
        // Most likely the catalog entry changed between our copy and the worker's: reload ours.
        log.warn('worker refused the job', { request_id: this.s.requestId, reason: e.message });
        void this.deps.catalog.fetch(this.model.id).catch(() => {});
        throw errors.modelChanged(this.model.id);
      }
      throw e;
    }
  }

  /**
   * What became of the job after its ack timed out (the client was answered 504). A worker reads
   * such a job too late to take it and refuses it: nothing will settle against the hold, which goes
   * back now. One whose ack was on its way when the door gave up has started it: it is stopped
   * there, and metering debits what the vendor may bill for it (the worst case stays counted here).
   * Nothing heard: the worst case stays counted until the hold expires.
   */
  private lateAnswer(late: LateAnswer): void {
    if (late.taken) {
      log.warn('a worker took the job after its request was answered 504; cancelling it', { request_id: this.s.requestId, worker: late.worker });
      this.held.settle(null);
      try {
        this.deps.nc.publish(subjects.cancel(late.worker, this.s.requestId));
      } catch {
        /* the door's connection is closing: the job runs to its end and is billed */
      }
    } else if (late.refused) {
      this.held.jobReturned();
      this.held.releaseSoon();
    } else this.held.settle(null);
  }

  private onFrame(frame: RawFrame): void {
    if (this.finished) {
      // the client is gone; the worker's terminal frame still says what the request cost
      if (frame.type === FRAME.done || frame.type === FRAME.error) {
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        this.held.settleFrame(frame, this.prices);
      }
      return;
    }
    switch (frame.type) {
      case FRAME.keepalive:
        // not while another model may still answer: the stream opens with the model that does
        if (!this.hasNext) this.reply.keepalive();
        return;
      case FRAME.text:
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        this.reply.text(frame.payload);
        return;
      case FRAME.extended: {
        const d = parsePayload(ExtendedDeltaSchema, frame.payload);
        if (!d) return this.badFrame();
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        this.reply.delta(d);
        return;
      }
      case FRAME.body:
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        this.reply.bodyPiece(payloadText(frame.payload));
        return;
      case FRAME.done: {
        const d = parsePayload(DoneSchema, frame.payload);
        if (!d) return this.badFrame();
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        const cost = usageCost(this.held.free, this.prices, d.usage, d.prices, d.extra_cost);
        this.held.settle(cost);
        this.complete({ finishReason: d.finish_reason, stopSequence: d.stop_sequence, usage: d.usage, estimated: d.estimated, costMicros: cost });
        return;
      }
      case FRAME.error: {
        const e = parsePayload(FrameErrorSchema, frame.payload);
        if (!e) return this.badFrame();
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        if (e.retryable && this.hasNext) {
          // the worker publishes no usage for a failure it marks retryable
          this.held.jobReturned();
          // never a retry once anything of this answer reached the client (or was collected for it)
          if (!this.sentAnything) return this.retryNext(e.code, e.extra_cost);
          // the worker published no usage for a failure it thought retried: its hold goes back (not charged)
          return this.dropRetryable(e.code, e.extra_cost, e);
        }
        this.held.settle(e.usage ? usageCost(this.held.free, this.prices, e.usage, e.prices, e.extra_cost) : null);
        const headers: Record<string, string> = e.retry_after !== undefined ? { 'retry-after': String(Math.ceil(e.retry_after)) } : {};
        this.fail(new CatracaError(e.status, errorTypeFor(e.status), e.code, e.message, null, headers));
        return;
      }
    }
  }

  /** Whether any byte of the answer went to the client, or any output was collected for it. */
  private get sentAnything(): boolean {
    return this.reply.started || this.firstByteAt !== null;
  }

  /**
   * A failure the worker marked retryable after something reached the client: answered as the
   * error it is. The worker published no usage for it, so no debit will come: the hold goes back
   * now, and what the failed attempt may cost is not charged (logged).
   */
  private dropRetryable(code: string, extra: string | undefined, e: FrameError): void {
    log.warn('a retryable failure after bytes reached the client: not retried, not charged', { request_id: this.s.requestId, code, cost: extra });
    this.held.releaseSoon();
    const headers: Record<string, string> = e.retry_after !== undefined ? { 'retry-after': String(Math.ceil(e.retry_after)) } : {};
    this.fail(new CatracaError(e.status, errorTypeFor(e.status), e.code, e.message, null, headers));
  }

  private badFrame(): void {
    this.deps.router.failRoute(this.s.requestId, errors.upstream(502, 'invalid_frame', 'The worker sent a malformed frame.'));
  }

  private complete(end: Ending): void {
    this.deps.router.unregister(this.s.requestId);
    const pending = this.reply.beforeEnd(end);
    if (pending) void pending.finally(() => this.writeEnd(end));
    else this.writeEnd(end);
  }

  private writeEnd(end: Ending): void {
    if (this.finished) return; // the client left while the end waited
    this.finish(this.reply.end(end));
  }

  private fail(err: unknown): void {
    if (this.finished) return;
    this.finish(this.reply.fail(err));
  }

  private finish(status: number): void {
    if (this.finished) return;
    this.finished = true;
    // A worker that took the job still owes its terminal frame (the request's cost, for the lease
    // accounting): the route stays until it arrives or the idle timeout gives up on it.
    if (!this.workerId || this.upstreamDone) this.deps.router.unregister(this.s.requestId);
    this.deps.onFinish?.(status, this.firstByteAt === null ? null : this.firstByteAt - this.startedAt, this.startedAt, this.protocol.name);
    if (this.span) {
      this.span.setAttribute('http.response.status_code', status);
      if (status >= 500) this.span.setStatus('error');
      this.span.end();
    }
  }

  /** Tells the worker to stop generating (it still publishes usage for what it generated). */
  private cancelUpstream(): void {
    if (this.workerId && !this.upstreamDone && !this.cancelSent) {
      this.cancelSent = true;
      if (this.workerId === this.deps.local?.id) this.deps.local.cancel(this.s.requestId);
      else this.deps.nc.publish(subjects.cancel(this.workerId, this.s.requestId));
    }
  }
}

/**
 * Tokens a request counts against its key's tokens-per-minute limit, as OpenAI counts them at
 * admission: its prompt estimate (a quarter of the prompt bound's bytes) plus its output cap.
 */
function rateTokens(candidates: Candidate[]): number {
  let most = 0;
  for (const c of candidates) most = Math.max(most, Math.ceil(c.inputTokens / 4) + (c.requested ?? c.wanted));
  return most;
}

/** Whether any of the model's deployments is one the request's provider preferences allow. */
function routable(model: CatalogEntry, routing: ParsedRequest['routing']): boolean {
  if (!routing) return true;
  const named = (d: { id: string; name: string }, names?: string[]) => names?.includes(d.name) || names?.includes(d.id);
  // with allow_fallbacks false only the ordered deployments may serve it
  const ordered = routing.allow_fallbacks === false && routing.order?.length ? routing.order : undefined;
  return model.deployments.some((d) => (routing.only?.length ? named(d, routing.only) : true) && !named(d, routing.ignore) && (!ordered || named(d, ordered)));
}

function errorTypeFor(status: number) {
  if (status === 504) return 'timeout_error' as const;
  if (status === 429) return 'rate_limit_error' as const;
  if (status === 400) return 'invalid_request_error' as const;
  if (status === 503) return 'service_unavailable' as const;
  return 'upstream_error' as const;
}
