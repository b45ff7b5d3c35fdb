import type { Job, UsageMessage } from '../src/bus/messages.ts';
import { encodeFrame, type FrameError, type OutFrame } from '../src/bus/frames.ts';
import type { CatalogEntry } from '../src/catalog/catalog.ts';
import type { Logger } from '../src/log.ts';
import type { Span } from '../src/tracing/tracer.ts';
import type { AdapterRegistry } from './adapters/registry.ts';
import { type AdapterEvent, isUpstreamError, newCall, type TokenUsage, type UpstreamCall } from './adapters/types.ts';
import type { Outbox } from './outbox.ts';
import type { UsagePublisher } from './usage-publisher.ts';

// One accepted job, from the upstream call to its last frame and its usage message: what the
// client is sent (frames, in order, on the job's reply subject) and what the tenant is billed.

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
  recordFirstToken(ms: number): void;
  onJobEnd?: (ms: number, outcome: UsageMessage['outcome']) => void;
}

const KEEPALIVE: OutFrame = { t: 'keepalive' };

export async function runJob(ctx: JobContext, job: Job, model: CatalogEntry, pool: string, acceptedAt: number, entry: Running): Promise<void> {
  const { log, counters } = ctx;
  const adapter = ctx.registry.forProtocol(model.protocol);
  const call: UpstreamCall = newCall(job, model);
  let seq = 0;
  // the first frame carries the job span's traceparent (the front door links it)
  const first = { traceparent: entry.span.traceparent() };
  const send = (frame: OutFrame) => {
    entry.lastSent = Date.now();
    ctx.outbox.publish(job.reply_to, encodeFrame(seq, frame), seq === 0 ? first : undefined);
    seq++;
  };
  entry.keepalive = () => send(KEEPALIVE);

  let output = '';
  let deltas = 0;
  let usage: TokenUsage | undefined;
  let promptUsage: number | undefined;
  let estimated = false;
  let finish: string | undefined;
  let failure: unknown;
  const onEvent = (ev: AdapterEvent) => {
    if (entry.why) return;
    switch (ev.type) {
      case 'delta':
        if (deltas++ === 0) ctx.recordFirstToken(Date.now() - acceptedAt);
        output += ev.content;
        send({ t: 'text', content: ev.content });
        return;
      case 'reasoning':
        if (deltas++ === 0) ctx.recordFirstToken(Date.now() - acceptedAt);
        output += ev.content;
        send({ t: 'extended', delta: { reasoning: ev.content } });
        return;
      case 'tool_calls':
        if (deltas++ === 0) ctx.recordFirstToken(Date.now() - acceptedAt);
        // generated output too: counted in the estimate when the upstream gives no usage
        for (const c of ev.tool_calls) output += (c.function?.name ?? '') + (c.function?.arguments ?? '');
        send({ t: 'extended', delta: { tool_calls: ev.tool_calls } });
        return;
      case 'prompt_usage':
        promptUsage = ev.prompt_tokens;
        return;
      case 'usage':
        usage = { prompt_tokens: ev.prompt_tokens, completion_tokens: ev.completion_tokens };
        estimated = ev.estimated ?? false;
        return;
      case 'finish':
        finish = ev.reason;
        return;
    }
  };
  try {
    await adapter.stream(call, entry.ac.signal, onEvent);
  } catch (err) {
    failure = err;
  } finally {
    entry.keepalive = undefined;
  }

  const why = entry.why;
  const ok = !why && failure === undefined;
  // Billing rule: the upstream's usage when it gave one. Otherwise the adapter's count of the
  // prompt and of what was generated, whenever the vendor may have billed the prompt: it
  // accepted the request, or it had the request when we cut it (a cancel before the first
  // token included). A request the vendor refused or never received costs nothing.
  if (!usage) {
    const ourCut = why !== undefined || (isUpstreamError(failure) && failure.code === 'upstream_timeout');
    if (ok || deltas > 0 || call.accepted || (call.sent && ourCut)) {
      try {
        const counted = await adapter.countUsage(call, output);
        usage = counted.usage;
        estimated = counted.estimated;
      } catch (err) {
        log.error('token count failed', { request_id: job.request_id, err: err as Error });
        usage = { prompt_tokens: 0, completion_tokens: deltas };
        estimated = true;
      }
      if (promptUsage !== undefined) usage = { prompt_tokens: promptUsage, completion_tokens: usage.completion_tokens };
    } else {
      usage = { prompt_tokens: 0, completion_tokens: 0 };
    }
  }

  let outcome: UsageMessage['outcome'];
  if (ok) {
    outcome = 'completed';
    counters.completed++;
    send({ t: 'done', done: { finish_reason: finish ?? 'stop', usage, estimated } });
  } else if (why === 'cancel') {
    outcome = 'cancelled';
    counters.cancelled++;
    send({ t: 'error', error: { status: 499, code: 'request_cancelled', message: 'The request was cancelled by the client.', usage } });
  } else {
    outcome = 'error';
    counters.failed++;
    if (why === 'deadline') {
      send({ t: 'error', error: { status: 504, code: 'upstream_timeout', message: 'The request did not finish before its deadline.', usage } });
    } else if (why === 'drain') {
      send({ t: 'error', error: { status: 503, code: 'worker_shutting_down', message: 'The worker serving this request shut down; retry.', usage } });
    } else if (isUpstreamError(failure)) {
      const error: FrameError = { status: failure.status, code: failure.code, message: failure.message, usage };
      if (failure.retryAfter !== undefined) error.retry_after = failure.retryAfter;
      send({ t: 'error', error });
      log.info('upstream error', { request_id: job.request_id, pool, status: failure.status, code: failure.code, tokens: deltas });
    } else {
      log.error('job failed unexpectedly', { request_id: job.request_id, pool, err: failure as Error });
      send({ t: 'error', error: { status: 502, code: 'upstream_error', message: 'The upstream call failed unexpectedly.', usage } });
    }
  }

  ctx.onJobEnd?.(Date.now() - acceptedAt, outcome);
  entry.span.setAttributes({
    'catraca.outcome': outcome,
    'catraca.prompt_tokens': usage.prompt_tokens,
    'catraca.completion_tokens': usage.completion_tokens,
    'catraca.estimated': estimated,
  });
  if (outcome === 'error') entry.span.setStatus('error');
  ctx.usage.publish(
    pool,
    {
      v: 1,
      request_id: job.request_id,
      tenant_id: job.tenant_id,
      key_id: job.key_id,
      model: job.model.id,
      pool,
      input_price: job.model.input_price,
      output_price: job.model.output_price,
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      estimated,
      outcome,
      ...(job.hold ? { hold: job.hold } : {}),
      ended_at: Date.now(),
      worker: ctx.workerId,
    },
    entry.span.traceparent(),
  );
}
