import { randomBytes } from 'node:crypto';
import { ErrorCode, type NatsConnection } from 'nats';
import type { Config } from '../../config.ts';
import type { Db } from '../../db/pool.ts';
import type { ApiKeyRecord } from '../../db/keys.ts';
import type { ModelRecord } from '../../db/models.ts';
import { releaseHold } from '../../billing/ledger.ts';
import type { AdmissionBatcher } from '../../billing/admission-batcher.ts';
import { affordableOutputTokens, brlNumber, costMicros, formatBrl, type Prices } from '../../billing/money.ts';
import { inputTokensUpperBound } from '../../billing/estimate.ts';
import { decodeJson, encode, JobAckSchema, type Frame, type Job } from '../../bus/messages.ts';
import { subjects } from '../../bus/subjects.ts';
import { CatracaError, errors } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import type { KeyCache } from '../key-cache.ts';
import type { Catalog } from '../catalog.ts';
import type { StreamRouter } from '../stream-router.ts';
import { KEEP_ALIVE_HINT, sendJson, statusLine, type ResponseState } from '../respond.ts';
import { ChatRequestSchema, describeIssue, type ChatRequest } from './schema.ts';
import { ChunkEncoder, completionBody, mergeToolCalls, type ToolCall, type UsageOut } from './openai-shapes.ts';
import { SseWriter } from './sse-writer.ts';
import type { GatewayMetrics } from '../metrics.ts';

const log = createLogger('gateway');
const JOB_ACK_TIMEOUT_MS = 5000;
const DISPATCH_ATTEMPTS = 3;

export interface ChatDeps {
  config: Config;
  db: Db;
  nc: NatsConnection;
  keys: KeyCache;
  catalog: Catalog;
  router: StreamRouter;
  portalUrl?: string;
  metrics?: GatewayMetrics;
  admission: AdmissionBatcher;
  /** Called once per request with its final HTTP status (metrics). */
  onFinish?: (status: number, ttfbMs: number | null, startedAt: number) => void;
}

export function newRequestId(): string {
  return `gen-${Date.now().toString(36)}${randomBytes(10).toString('hex')}`;
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
  /** x-ratelimit-* headers, sent on every answer once admission has counted the request */
  private headers: Record<string, string> = {};
  private model!: ModelRecord;
  private prices!: Prices;
  private includeUsage = false;
  private streaming = false;
  private firstByteAt: number | null = null;
  private readonly startedAt = Date.now();

  constructor(private deps: ChatDeps, private s: ResponseState, private authorization: string) {}

  /** uWS onAborted: the client went away. */
  aborted(): void {
    this.s.aborted = true;
    this.sse?.markAborted();
    this.cancelUpstream();
    this.finish(499);
  }

  async run(rawBody: Buffer): Promise<void> {
    try {
      const key = await this.deps.keys.authenticate(this.authorization);
      const body = this.parse(rawBody);
      const model = await this.deps.catalog.get(body.model);
      if (!model) throw errors.modelNotFound(body.model);
      if (key.models && !key.models.includes(model.id)) throw errors.modelNotAllowed(model.id);
      if (this.s.aborted) return;
      this.model = model;
      this.prices = { input: model.input_price, output: model.output_price };
      this.streaming = body.stream === true;
      this.includeUsage = body.stream_options?.include_usage === true;
      const maxTokens = await this.hold(key, body);
      if (this.s.aborted) {
        await releaseHold(this.deps.db, this.s.requestId);
        return;
      }
      await this.dispatch(key, body, maxTokens);
    } catch (err) {
      this.fail(err);
    }
  }

  private parse(raw: Buffer): ChatRequest {
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
  private async hold(key: ApiKeyRecord, body: ChatRequest): Promise<number> {
    const model = this.model;
    const requested = body.max_completion_tokens ?? body.max_tokens ?? null;
    if (requested !== null && requested > model.max_output_tokens) {
      throw errors.badRequest(
        `max_tokens is too large: ${requested}. This model supports at most ${model.max_output_tokens} completion tokens.`,
        body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
      );
    }
    const inputTokens = inputTokensUpperBound(body);
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
    });
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
        pool: this.model.pool,
        upstream_model: this.model.upstream_model,
        base_url: this.model.base_url,
        api_key_env: this.model.api_key_env,
        input_price: this.model.input_price.toString(),
        output_price: this.model.output_price.toString(),
      },
      body: rest,
      max_tokens: maxTokens,
      reply_to: this.deps.router.replySubject(this.s.requestId),
      deadline: Date.now() + this.deps.config.REQUEST_TIMEOUT_MS,
    };
    this.encoder = new ChunkEncoder(this.s.requestId, this.model.id, Math.floor(this.startedAt / 1000));
    this.deps.router.register(this.s.requestId, {
      onFrame: (frame) => this.onFrame(frame),
      onFailure: (err) => {
        this.cancelUpstream();
        this.fail(err);
      },
    });
    const payload = encode(job);
    let refusal: CatracaError | null = null; // built only when needed: an Error captures a stack
    for (let attempt = 0; attempt < DISPATCH_ATTEMPTS; attempt++) {
      let reply;
      try {
        reply = await this.deps.nc.request(subjects.job(this.model.pool), payload, { timeout: JOB_ACK_TIMEOUT_MS });
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === ErrorCode.NoResponders) {
          this.deps.metrics?.noResponders();
          refusal = errors.noWorker(this.model.pool);
          break;
        }
        // No answer in time: a worker may still hold the job, so the hold stays (it settles or
        // the sweeper releases it).
        this.deps.router.unregister(this.s.requestId);
        throw code === ErrorCode.Timeout ? errors.timeout('No worker acknowledged the request in time.') : err;
      }
      const ack = JobAckSchema.safeParse(decodeJson(reply.data));
      if (ack.success && ack.data.ok) {
        this.workerId = ack.data.worker;
        if (this.s.aborted) this.cancelUpstream();
        return;
      }
      if (ack.success && !ack.data.ok && ack.data.code === 'invalid_job') {
        log.error('worker refused job as invalid', { request_id: this.s.requestId, reason: ack.data.message });
        refusal = errors.internal();
        break;
      }
    }
    this.deps.router.unregister(this.s.requestId);
    await releaseHold(this.deps.db, this.s.requestId);
    throw refusal ?? errors.overloaded();
  }

  private onFrame(frame: Frame): void {
    if (this.finished) return;
    switch (frame.t) {
      case 'keepalive':
        if (this.streaming) {
          this.startStream();
          this.sse?.write(ChunkEncoder.keepalive);
        }
        return;
      case 'delta':
        if (this.firstByteAt === null) this.firstByteAt = Date.now();
        if (this.streaming) {
          this.startStream();
          this.sse?.write(frame.tool_calls || frame.reasoning ? this.encoder.delta(extendedDelta(frame)) : this.encoder.content(frame.content));
        } else {
          if (frame.content) this.content.push(frame.content);
          if (frame.reasoning) this.reasoning.push(frame.reasoning);
          if (frame.tool_calls) mergeToolCalls(this.toolCalls, frame.tool_calls);
        }
        return;
      case 'done':
        this.upstreamDone = true;
        this.complete(frame.finish_reason, this.usageOut(frame.usage.prompt_tokens, frame.usage.completion_tokens, frame.estimated));
        return;
      case 'error':
        this.upstreamDone = true;
        this.deps.router.unregister(this.s.requestId);
        this.fail(
          new CatracaError(frame.status, errorTypeFor(frame.status), frame.code, frame.message, null,
            frame.retry_after !== undefined ? { 'retry-after': String(Math.ceil(frame.retry_after)) } : {}),
        );
        return;
    }
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

  private startStream(): void {
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
    res.cork(() => {
      res.writeStatus('200 OK');
      res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
      res.writeHeader('cache-control', 'no-cache');
      res.writeHeader('x-request-id', this.s.requestId);
      res.writeHeader('x-accel-buffering', 'no');
      res.writeHeader('keep-alive', KEEP_ALIVE_HINT);
      for (const k in this.headers) res.writeHeader(k, this.headers[k]);
    });
    this.sse.write(this.encoder.role());
  }

  private complete(finishReason: string, usage: UsageOut): void {
    this.deps.router.unregister(this.s.requestId);
    if (this.streaming) {
      this.startStream();
      const tail = this.encoder.finish(finishReason) + (this.includeUsage ? this.encoder.usage(usage) : '') + ChunkEncoder.done;
      this.sse?.end(tail);
      this.s.done = true;
    } else {
      sendJson(this.s, 200, completionBody(this.s.requestId, this.model.id, this.encoder.created, this.content.join(''), finishReason, usage, this.toolCalls, this.reasoning.join('')), this.headers);
    }
    this.finish(200);
  }

  private fail(err: unknown): void {
    if (this.finished) return;
    if (!(err instanceof CatracaError)) log.error('request failed', { request_id: this.s.requestId, err: err as Error });
    const e = err instanceof CatracaError ? err : errors.internal();
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
    this.deps.router.unregister(this.s.requestId);
    this.deps.onFinish?.(status, this.firstByteAt === null ? null : this.firstByteAt - this.startedAt, this.startedAt);
  }

  /** Tells the worker to stop generating (it still publishes usage for what it generated). */
  private cancelUpstream(): void {
    this.deps.router.unregister(this.s.requestId);
    if (this.workerId && !this.upstreamDone && !this.cancelSent) {
      this.cancelSent = true;
      this.deps.nc.publish(subjects.cancel(this.workerId, this.s.requestId));
    }
  }
}

/** The delta object of a frame that carries more than text (OpenRouter's `reasoning`, OpenAI's `tool_calls`). */
function extendedDelta(frame: Extract<Frame, { t: 'delta' }>): Record<string, unknown> {
  const d: Record<string, unknown> = {};
  if (frame.content) d.content = frame.content;
  if (frame.reasoning) d.reasoning = frame.reasoning;
  if (frame.tool_calls) d.tool_calls = frame.tool_calls;
  return d;
}

function errorTypeFor(status: number) {
  if (status === 504) return 'timeout_error' as const;
  if (status === 429) return 'rate_limit_error' as const;
  if (status === 400) return 'invalid_request_error' as const;
  if (status === 503) return 'service_unavailable' as const;
  return 'upstream_error' as const;
}

export { statusLine };
