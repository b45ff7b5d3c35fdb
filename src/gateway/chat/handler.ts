import { isUtf8 } from 'node:buffer';
import { randomFillSync } from 'node:crypto';
import type { NatsConnection } from 'nats';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/pool.ts';
import type { ApiKeyRecord } from '../../db/keys.ts';
import type { Admission } from '../../billing/admission.ts';
import type { Dispatcher, Ticket } from '../dispatcher.ts';
import { affordableOutputTokens, brlNumber, costMicros, formatBrl, type Prices } from '../../billing/money.ts';
import { inputTokensUpperBound } from '../../billing/estimate.ts';
import { encode, type Job } from '../../bus/messages.ts';
import { DoneSchema, ExtendedDeltaSchema, FRAME, FrameErrorSchema, parsePayload, payloadText, type RawFrame } from '../../bus/frames.ts';
import { subjects } from '../../bus/subjects.ts';
import { CatracaError, errors } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import type { KeyCache } from '../key-cache.ts';
import type { Catalog, CatalogEntry } from '../../catalog/catalog.ts';
import { checkParams, wantsUsage } from '../../chat/params.ts';
import { MAX_JSON_DEPTH, scanJson } from '../../chat/json-depth.ts';
import type { StreamRouter } from '../stream-router.ts';
import { KEEP_ALIVE_HINT, publicError, sendJson, statusLine, type ResponseState } from '../respond.ts';
import { ChatRequestSchema, describeIssue, type ChatRequest } from './schema.ts';
import { ChunkEncoder, completionBody, mergeToolCalls, type ToolCall, type UsageOut } from './openai-shapes.ts';
import { SseWriter } from './sse-writer.ts';
import type { GatewayMetrics } from '../metrics.ts';
import type { Span, Tracer } from '../../tracing/tracer.ts';
import type { WorkerHandle } from '../../../workers/worker.ts';

const log = createLogger('gateway');

export interface ChatDeps {
  config: Config;
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
  local?: WorkerHandle;
  /** One span per request (`chat.completions`); its traceparent goes to the worker with the job. */
  tracer?: Tracer;
  /** Called once per request with its final HTTP status (metrics). */
  onFinish?: (status: number, ttfbMs: number | null, startedAt: number) => void;
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

/**
 * One chat completion from admission to the last SSE byte. The hold taken here is released by
 * the metering consumer when the worker's usage settles, or here when no worker took the job.
 */
export class ChatCompletion {
  private workerId?: string;
  private sse?: SseWriter;
  private encoder!: ChunkEncoder;
  private content: string[] = [];
  private toolCalls: ToolCall[] = [];
  private reasoning: string[] = [];
  private started = false; // SSE headers sent
  private finished = false;
  private upstreamDone = false; // terminal frame received
  private cancelSent = false;
  /** the hold this request was admitted under (its id, or the door's lease) */
  private hold = '';
  /** the admission was told how the request ended (lease accounting) */
  private accounted = false;
  private ticket?: Ticket;
  /** x-ratelimit-* headers, sent on every answer once admission has counted the request */
  private headers: Record<string, string> = {};
  private model!: CatalogEntry;
  private prices!: Prices;
  private includeUsage = false;
  private streaming = false;
  private firstByteAt: number | null = null;
  private readonly startedAt = Date.now();
  private readonly span?: Span;

  /** `traceparent`: the client's header (W3C), the parent of this request's span. */
  constructor(
    private deps: ChatDeps,
    private s: ResponseState,
    private authorization: string,
    traceparent?: string,
  ) {
    this.span = deps.tracer?.startSpan('chat.completions', {
      parent: traceparent,
      kind: 'server',
      attributes: { 'http.request.method': 'POST', 'url.path': '/v1/chat/completions', 'catraca.request_id': s.requestId },
    });
  }

  /** uWS onAborted: the client went away. */
  aborted(): void {
    this.s.aborted = true;
    this.ticket?.cancel(); // a job still waiting for a worker never reaches one
    this.sse?.markAborted();
    this.cancelUpstream();
    this.finish(499);
  }

  async run(rawBody: Buffer, authenticated?: Promise<ApiKeyRecord>): Promise<void> {
    try {
      const key = await (authenticated ?? this.deps.keys.authenticate(this.authorization));
      const body = this.parse(rawBody);
      const model = await this.deps.catalog.get(body.model);
      if (!model) throw errors.modelNotFound(body.model);
      if (key.models && !key.models.includes(model.id)) throw errors.modelNotAllowed(model.id);
      const refusal = checkParams(body, model);
      if (refusal) throw errors.badRequest(refusal.message, refusal.param, refusal.code);
      if (this.s.aborted) return;
      this.model = model;
      this.prices = { input: model.input_price, output: model.output_price };
      this.streaming = body.stream === true;
      this.includeUsage = wantsUsage(body);
      const maxTokens = await this.admit(key, body);
      if (this.s.aborted) {
        await this.deps.admission.release(this.s.requestId);
        return;
      }
      await this.dispatch(key, body, maxTokens);
    } catch (err) {
      this.fail(err);
    }
  }

  private parse(raw: Buffer): ChatRequest {
    // before JSON.parse: bytes it would silently replace (U+FFFD), nesting that overflows the
    // stack of whatever walks the value later, numbers it would turn into Infinity
    if (!isUtf8(raw)) throw errors.invalidUtf8();
    const problem = scanJson(raw, MAX_JSON_DEPTH);
    if (problem?.kind === 'too_deep') throw errors.jsonTooDeep(MAX_JSON_DEPTH);
    if (problem?.kind === 'number_out_of_range') throw errors.numberOutOfRange(problem.literal);
    let json: unknown;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch {
      throw errors.invalidJson();
    }
    if (!json || typeof json !== 'object' || Array.isArray(json)) throw errors.badRequest('Request body must be a JSON object.');
    const parsed = ChatRequestSchema.safeParse(json);
    if (!parsed.success) {
      const { message, param } = describeIssue(parsed.error);
      throw errors.badRequest(message, param);
    }
    return parsed.data;
  }

  /** Reserves the worst case; returns the max_tokens the hold pays for. */
  private async admit(key: ApiKeyRecord, body: ChatRequest): Promise<number> {
    const model = this.model;
    const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
    if (requested !== null && requested > model.max_output_tokens) {
      throw errors.badRequest(
        `max_tokens is too large: ${requested}. This model supports at most ${model.max_output_tokens} completion tokens.`,
        body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
      );
    }
    const inputTokens = inputTokensUpperBound(body, model);
    const wanted = requested ?? model.max_output_tokens;
    const max = costMicros(inputTokens, wanted, this.prices);
    const min = requested !== null ? max : costMicros(inputTokens, 1, this.prices);
    const admitStarted = performance.now();
    const result = await this.deps.admission.admit({
      requestId: this.s.requestId,
      tenantId: key.tenant_id,
      keyId: key.id,
      min,
      max,
      ttlMs: this.deps.config.REQUEST_TIMEOUT_MS + this.deps.config.HOLD_GRACE_MS,
      leasable: key.rate_limit_requests === null,
    });
    this.hold = result.hold;
    this.deps.metrics?.admitted(performance.now() - admitStarted);
    if (result.rl_limit !== null && result.rl_reset_ms !== null) {
      this.headers = {
        'x-ratelimit-limit': String(result.rl_limit),
        'x-ratelimit-remaining': String(Math.max(0, result.rl_remaining ?? 0)),
        'x-ratelimit-reset': String(Date.now() + Number(result.rl_reset_ms)),
      };
    }
    if (result.status === 'rate_limited') {
      throw errors.rateLimited(Math.max(1, Math.ceil(Number(result.rl_reset_ms) / 1000)), this.headers);
    }
    if (result.status === 'ok') {
      return requested ?? Math.max(1, affordableOutputTokens(result.held, inputTokens, this.prices, wanted));
    }
    if (result.status === 'key_revoked') {
      this.deps.keys.invalidate(key.id);
      throw errors.revokedKey();
    }
    const affordable = affordableOutputTokens(result.available, inputTokens, this.prices, wanted);
    const what = result.status === 'key_limit' ? "this key's remaining limit" : 'your available balance';
    const message =
      affordable >= 0
        ? `This request requires more credits, or fewer max_tokens. You requested up to ${wanted} tokens, but can only afford ${affordable} with ${what} of R$ ${formatBrl(result.available)}.`
        : `This request requires more credits: its input alone can cost up to R$ ${formatBrl(costMicros(inputTokens, 0, this.prices))}, more than ${what} of R$ ${formatBrl(result.available)}.`;
    const hint = this.deps.portalUrl ? ` Top up at ${this.deps.portalUrl}.` : '';
    throw result.status === 'key_limit' ? errors.keyLimit(message) : errors.insufficientBalance(message + hint);
  }

  private async dispatch(key: ApiKeyRecord, body: ChatRequest, maxTokens: number): Promise<void> {
    const { model: _model, ...rest } = body;
    const job: Job = {
      v: 1,
      request_id: this.s.requestId,
      tenant_id: key.tenant_id,
      key_id: key.id,
      model: {
        id: this.model.id,
        fingerprint: this.model.fingerprint,
        input_price: this.model.input_price.toString(),
        output_price: this.model.output_price.toString(),
      },
      body: rest,
      hold: this.hold,
      max_tokens: maxTokens,
      reply_to: this.deps.router.replySubject(this.s.requestId),
      deadline: Date.now() + this.deps.config.REQUEST_TIMEOUT_MS,
    };
    this.encoder = new ChunkEncoder(this.s.requestId, this.model.id, Math.floor(this.startedAt / 1000));
    this.deps.router.register(this.s.requestId, {
      onFrame: (frame) => this.onFrame(frame),
      onFailure: (err) => {
        this.account(null); // the end was never seen: its worst case stays counted
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
    const taken = offerLocal?.();
    if (taken) {
      this.workerId = taken;
      this.deps.router.started(this.s.requestId);
      return;
    }
    const payload = encode(job);
    // NATS refuses a message over the server's max_payload (1 MiB by default, below MAX_BODY_BYTES):
    // the job never leaves, so its hold goes back at once and the client gets a 413, not a 500.
    const maxPayload = this.deps.nc.info?.max_payload;
    if (maxPayload !== undefined && payload.byteLength > maxPayload) {
      this.accounted = true;
      this.deps.router.unregister(this.s.requestId);
      await this.deps.admission.release(this.s.requestId);
      throw errors.jobTooLarge(maxPayload);
    }
    this.ticket = this.deps.dispatcher.submit(this.model.pool, key.tenant_id, payload, this.span && { traceparent: this.span.traceparent() }, offerLocal);
    try {
      const { worker } = await this.ticket.result;
      this.workerId = worker;
      this.deps.router.started(this.s.requestId);
      // the client left, or the response already ended, while the job was on its way: stop it there
      if (this.s.aborted || this.finished) this.cancelUpstream();
      return;
    } catch (err) {
      const e = err as CatracaError;
      this.deps.router.unregister(this.s.requestId);
      if (e.code === 'upstream_timeout') {
        // No worker answered in time: one may still hold the job, so the hold stays (it settles
        // or expires and the sweeper releases it).
        this.account(null);
        throw e;
      }
      this.accounted = true;
      await this.deps.admission.release(this.s.requestId);
      if (e.code === 'no_worker_available') this.deps.metrics?.noResponders();
      if (e.code === 'worker_refused') {
        // Most likely the catalog entry changed between our copy and the worker's: reload ours.
        log.warn('worker refused the job', { request_id: this.s.requestId, reason: e.message });
        void this.deps.catalog.fetch(this.model.id).catch(() => {});
        throw errors.modelChanged(this.model.id);
      }
      throw e;
    }
  }

  private onFrame(frame: RawFrame): void {
    if (this.finished) {
      // the client is gone; the worker's terminal frame still says what the request cost
      if (frame.type === FRAME.done || frame.type === FRAME.error) this.accountFrame(frame);
      return;
    }
    switch (frame.type) {
      case FRAME.keepalive:
        if (this.streaming) {
          this.send(ChunkEncoder.keepalive);
        }
        return;
      case FRAME.text:
        // the hot path: the worker's JSON string literal goes into the chunk as bytes
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        if (this.streaming) {
          this.send(this.encoder.contentBytes(frame.payload));
        } else {
          this.content.push(JSON.parse(payloadText(frame.payload)) as string);
        }
        return;
      case FRAME.extended: {
        const d = parsePayload(ExtendedDeltaSchema, frame.payload);
        if (!d) return this.badFrame();
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        if (this.streaming) {
          this.send(this.encoder.delta(d));
        } else {
          if (d.content) this.content.push(d.content);
          if (d.reasoning) this.reasoning.push(d.reasoning);
          if (d.tool_calls) mergeToolCalls(this.toolCalls, d.tool_calls);
        }
        return;
      }
      case FRAME.done: {
        const d = parsePayload(DoneSchema, frame.payload);
        if (!d) return this.badFrame();
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        this.account(costMicros(d.usage.prompt_tokens, d.usage.completion_tokens, this.prices));
        this.complete(d.finish_reason, this.usageOut(d.usage.prompt_tokens, d.usage.completion_tokens, d.estimated));
        return;
      }
      case FRAME.error: {
        const e = parsePayload(FrameErrorSchema, frame.payload);
        if (!e) return this.badFrame();
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        this.account(e.usage ? costMicros(e.usage.prompt_tokens, e.usage.completion_tokens, this.prices) : null);
        this.fail(
          new CatracaError(
            e.status,
            errorTypeFor(e.status),
            e.code,
            e.message,
            null,
            e.retry_after !== undefined ? { 'retry-after': String(Math.ceil(e.retry_after)) } : {},
          ),
        );
        return;
      }
    }
  }

  /** A terminal frame after the response ended: only its cost matters now. */
  private accountFrame(frame: RawFrame): void {
    this.upstreamDone = true;
    this.deps.router.unregister(this.s.requestId);
    const usage = frame.type === FRAME.done ? parsePayload(DoneSchema, frame.payload)?.usage : parsePayload(FrameErrorSchema, frame.payload)?.usage;
    this.account(usage ? costMicros(usage.prompt_tokens, usage.completion_tokens, this.prices) : null);
  }

  /** Tells admission how the request ended: what it will be debited, or null when unknown. */
  private account(cost: bigint | null): void {
    if (this.accounted || !this.hold) return;
    this.accounted = true;
    this.deps.admission.finish(this.s.requestId, cost);
  }

  private badFrame(): void {
    this.deps.router.failRoute(this.s.requestId, errors.upstream(502, 'invalid_frame', 'The worker sent a malformed frame.'));
  }

  private usageOut(prompt: number, completion: number, estimated: boolean): UsageOut {
    const usage: UsageOut = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      cost: brlNumber(costMicros(prompt, completion, this.prices)),
    };
    if (estimated) usage.estimated = true;
    return usage;
  }

  /** Sends one SSE chunk; the first goes out with the status, the headers and the role chunk in one write. */
  private send(chunk: string | Uint8Array): void {
    if (this.started) this.sse?.write(chunk);
    else this.startStream(chunk);
  }

  private startStream(first?: string | Uint8Array): void {
    if (this.started || this.s.aborted) return;
    this.started = true;
    const res = this.s.res;
    this.sse = new SseWriter(res, this.deps.config.MAX_CLIENT_BUFFER_BYTES, () => {
      log.warn('client too slow; cancelling', { request_id: this.s.requestId });
      this.cancelUpstream();
      this.finish(200);
      this.s.done = true;
      res.close();
    });
    const role = this.encoder.role();
    const body = first === undefined ? role : typeof first === 'string' ? role + first : Buffer.concat([Buffer.from(role), first]);
    this.sse.write(body, () => {
      res.writeStatus('200 OK');
      res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
      res.writeHeader('cache-control', 'no-cache');
      res.writeHeader('x-request-id', this.s.requestId);
      res.writeHeader('x-accel-buffering', 'no');
      res.writeHeader('keep-alive', KEEP_ALIVE_HINT);
      for (const k in this.headers) res.writeHeader(k, this.headers[k]);
    });
  }

  private complete(finishReason: string, usage: UsageOut): void {
    this.deps.router.unregister(this.s.requestId);
    if (this.streaming) {
      this.startStream();
      const tail = this.encoder.finish(finishReason) + (this.includeUsage ? this.encoder.usage(usage) : '') + ChunkEncoder.done;
      this.sse?.end(tail);
      this.s.done = true;
    } else {
      sendJson(
        this.s,
        200,
        completionBody(
          this.s.requestId,
          this.model.id,
          this.encoder.created,
          this.content.join(''),
          finishReason,
          usage,
          this.toolCalls,
          this.reasoning.join(''),
        ),
        this.headers,
      );
    }
    this.finish(200);
  }

  private fail(err: unknown): void {
    if (this.finished) return;
    const e = publicError(err);
    if (e.status === 500) log.error('request failed', { request_id: this.s.requestId, err: err as Error });
    else if (!(err instanceof CatracaError)) log.warn('request refused: database', { request_id: this.s.requestId, code: e.code, err: err as Error });
    if (this.started) {
      this.deps.metrics?.midStreamError();
      this.sse?.end(this.encoder.error(e.code, e.message, e.status) + ChunkEncoder.done);
      this.s.done = true;
    } else {
      sendJson(this.s, e.status, e.toJSON(), { ...this.headers, ...e.headers });
    }
    this.finish(this.started ? 200 : e.status);
  }

  private finish(status: number): void {
    if (this.finished) return;
    this.finished = true;
    // A worker that took the job still owes its terminal frame (the request's cost, for the lease
    // accounting): the route stays until it arrives or the idle timeout gives up on it.
    if (!this.workerId || this.upstreamDone) this.deps.router.unregister(this.s.requestId);
    this.deps.onFinish?.(status, this.firstByteAt === null ? null : this.firstByteAt - this.startedAt, this.startedAt);
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

function errorTypeFor(status: number) {
  if (status === 504) return 'timeout_error' as const;
  if (status === 429) return 'rate_limit_error' as const;
  if (status === 400) return 'invalid_request_error' as const;
  if (status === 503) return 'service_unavailable' as const;
  return 'upstream_error' as const;
}

export { statusLine };
