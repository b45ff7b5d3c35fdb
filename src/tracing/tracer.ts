import { createLogger } from '../log.ts';
import { VERSION } from '../version.ts';
import { formatTraceparent, isSampled, newSpanId, newTraceId, parseTraceparent, type SpanContext } from './traceparent.ts';

// A minimal OpenTelemetry-compatible tracer (no dependency): spans with W3C trace context, ended
// spans handed to an exporter — in memory for tests, OTLP/HTTP JSON to a collector when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, none otherwise (the default: spans still carry and pass on
// the trace context, nothing is recorded or sent).
//
// catraca makes one span per request per process, never per token:
//   gateway  `chat.completions` (server)  a new trace (sampled by our own rule); the client's
//                                         `traceparent` header, if any, is a link, never the parent
//   worker   `job` (consumer)             parent: the job message's `traceparent` NATS header
//   metering `settle` (consumer)          parent: the usage message's `traceparent` NATS header
// The worker also puts its span's `traceparent` on the first frame of the request's stream; the
// front door records it as a link of its span.

export type SpanKind = 'internal' | 'server' | 'client' | 'producer' | 'consumer';
export type AttributeValue = string | number | boolean;

export interface FinishedSpan {
  name: string;
  kind: SpanKind;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  traceFlags: number;
  /** epoch ms, sub-ms precision */
  startTime: number;
  endTime: number;
  attributes: Record<string, AttributeValue>;
  status: { code: 'unset' | 'ok' | 'error'; message?: string };
  links: Array<{ traceId: string; spanId: string }>;
  /** the process (service.name) */
  service: string;
}

export interface SpanExporter {
  /** Called with each ended, sampled span; must not throw or block. */
  export(span: FinishedSpan): void;
  /** Sends what is buffered. */
  flush?(): Promise<void>;
  shutdown?(): Promise<void>;
}

const now = () => performance.timeOrigin + performance.now();

export class Span {
  readonly context: SpanContext;
  private readonly startTime = now();
  private attributes: Record<string, AttributeValue>;
  private status: FinishedSpan['status'] = { code: 'unset' };
  private links: FinishedSpan['links'] = [];
  private ended = false;
  private readonly recording: boolean;

  constructor(
    private readonly tracer: Tracer,
    readonly name: string,
    readonly kind: SpanKind,
    readonly parentSpanId: string | null,
    context: SpanContext,
    attributes: Record<string, AttributeValue>,
  ) {
    this.context = context;
    // a tracer that exports nothing keeps only the context (what is propagated): no per-request bookkeeping
    this.recording = tracer.recording;
    this.attributes = this.recording ? { ...attributes } : attributes;
  }

  get traceId(): string {
    return this.context.traceId;
  }
  get spanId(): string {
    return this.context.spanId;
  }
  /** This span as a `traceparent` header value (the parent of what it causes). */
  traceparent(): string {
    return formatTraceparent(this.context);
  }
  // an ended span is immutable (the exporter holds what it had): later changes are ignored
  setAttribute(key: string, value: AttributeValue | undefined | null): this {
    if (this.recording && !this.ended && value !== undefined && value !== null) this.attributes[key] = value;
    return this;
  }
  setAttributes(attrs: Record<string, AttributeValue | undefined | null>): this {
    if (!this.recording) return this;
    for (const k in attrs) this.setAttribute(k, attrs[k]);
    return this;
  }
  setStatus(code: 'ok' | 'error', message?: string): this {
    if (this.ended) return this;
    this.status = message === undefined ? { code } : { code, message };
    return this;
  }
  /** Links another span (e.g. the worker's, from the first frame's `traceparent`). Invalid values are ignored. */
  addLink(traceparent: string | SpanContext | null | undefined): this {
    const ctx = typeof traceparent === 'string' ? parseTraceparent(traceparent) : traceparent;
    if (ctx && !this.ended) this.links.push({ traceId: ctx.traceId, spanId: ctx.spanId });
    return this;
  }
  get isEnded(): boolean {
    return this.ended;
  }
  /** Ends the span (once; later calls do nothing) and hands it to the exporter when sampled. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.recording) return;
    this.tracer.finish({
      name: this.name,
      kind: this.kind,
      traceId: this.context.traceId,
      spanId: this.context.spanId,
      parentSpanId: this.parentSpanId,
      traceFlags: this.context.traceFlags,
      startTime: this.startTime,
      endTime: now(),
      attributes: this.attributes,
      status: this.status,
      links: this.links,
      service: this.tracer.serviceName,
    });
  }
}

export interface StartSpanOptions {
  /** the parent: a `traceparent` header value or a span context; absent or invalid → a new trace */
  parent?: string | SpanContext | null;
  kind?: SpanKind;
  attributes?: Record<string, AttributeValue>;
  /** spans this one is linked to (not caused by): `traceparent` values or contexts; invalid ones are ignored */
  links?: Array<string | SpanContext | null | undefined>;
}

export class Tracer {
  constructor(
    readonly serviceName: string,
    readonly exporter: SpanExporter | null = null,
  ) {}

  get recording(): boolean {
    return this.exporter !== null;
  }

  startSpan(name: string, opts: StartSpanOptions = {}): Span {
    const parent = typeof opts.parent === 'string' || opts.parent == null ? parseTraceparent(opts.parent ?? null) : opts.parent;
    const ctx: SpanContext = parent
      ? { traceId: parent.traceId, spanId: newSpanId(), traceFlags: parent.traceFlags }
      : { traceId: newTraceId(), spanId: newSpanId(), traceFlags: 1 };
    const span = new Span(this, name, opts.kind ?? 'internal', parent?.spanId ?? null, ctx, opts.attributes ?? {});
    for (const link of opts.links ?? []) span.addLink(link);
    return span;
  }

  /** @internal called by Span.end() */
  finish(span: FinishedSpan): void {
    if (this.exporter && isSampled(span)) this.exporter.export(span);
  }

  async flush(): Promise<void> {
    await this.exporter?.flush?.();
  }

  async shutdown(): Promise<void> {
    await this.exporter?.shutdown?.();
  }
}

/** Keeps every ended span in memory (tests). */
export class InMemorySpanExporter implements SpanExporter {
  readonly spans: FinishedSpan[] = [];
  export(span: FinishedSpan): void {
    this.spans.push(span);
  }
  reset(): void {
    this.spans.length = 0;
  }
}

// ------------------------------------------------------------------------------ OTLP/HTTP JSON

const KIND: Record<SpanKind, number> = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 };
const STATUS = { unset: 0, ok: 1, error: 2 } as const;

function otlpValue(v: AttributeValue) {
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  return Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v };
}
const otlpAttributes = (attrs: Record<string, AttributeValue>) => Object.entries(attrs).map(([key, v]) => ({ key, value: otlpValue(v) }));
const nanos = (ms: number) => (BigInt(Math.floor(ms)) * 1_000_000n + BigInt(Math.round((ms % 1) * 1e6))).toString();

/** The OTLP/JSON body (ExportTraceServiceRequest) of some spans of one service. */
export function otlpTraceRequest(service: string, spans: FinishedSpan[]): unknown {
  return {
    resourceSpans: [
      {
        resource: { attributes: otlpAttributes({ 'service.name': service, 'service.version': VERSION, 'process.pid': process.pid }) },
        scopeSpans: [
          {
            scope: { name: 'catraca', version: VERSION },
            spans: spans.map((s) => ({
              traceId: s.traceId,
              spanId: s.spanId,
              ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
              flags: s.traceFlags,
              name: s.name,
              kind: KIND[s.kind],
              startTimeUnixNano: nanos(s.startTime),
              endTimeUnixNano: nanos(s.endTime),
              attributes: otlpAttributes(s.attributes),
              links: s.links.map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
              status: s.status.message === undefined ? { code: STATUS[s.status.code] } : { code: STATUS[s.status.code], message: s.status.message },
            })),
          },
        ],
      },
    ],
  };
}

export interface OtlpOptions {
  /** full URL of the traces endpoint, e.g. http://collector:4318/v1/traces */
  url: string;
  service: string;
  headers?: Record<string, string>;
  /** send when this many spans wait (default 512) */
  maxBatch?: number;
  /** send what waits at least this often (default 2000 ms) */
  intervalMs?: number;
  /** spans kept while the collector is slow or away; beyond, new spans are dropped and counted (default 8192) */
  maxQueue?: number;
  timeoutMs?: number;
}

const log = createLogger('tracing');

/**
 * Batches spans and POSTs them as OTLP/JSON (`Content-Type: application/json`) to the collector:
 * every `intervalMs`, or at once when `maxBatch` wait. One request at a time; a failed batch is
 * logged (at most once a minute) and dropped — tracing never holds up or breaks a request.
 */
export class OtlpHttpExporter implements SpanExporter {
  private queue: FinishedSpan[] = [];
  private sending: Promise<void> | null = null;
  private timer: NodeJS.Timeout;
  private lastError = 0;
  readonly counts = { exported: 0, dropped: 0, failed: 0 };

  constructor(private opts: OtlpOptions) {
    this.timer = setInterval(() => void this.flush(), opts.intervalMs ?? 2000);
    this.timer.unref();
  }

  export(span: FinishedSpan): void {
    if (this.queue.length >= (this.opts.maxQueue ?? 8192)) {
      this.counts.dropped++;
      return;
    }
    this.queue.push(span);
    if (this.queue.length >= (this.opts.maxBatch ?? 512) && !this.sending) void this.flush();
  }

  async flush(): Promise<void> {
    while (this.sending) await this.sending;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.opts.maxBatch ?? 512);
      this.sending = this.send(batch).finally(() => (this.sending = null));
      await this.sending;
    }
  }

  private async send(batch: FinishedSpan[]): Promise<void> {
    try {
      const res = await fetch(this.opts.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...this.opts.headers },
        body: JSON.stringify(otlpTraceRequest(this.opts.service, batch)),
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 10000),
      });
      await res.arrayBuffer().catch(() => {});
      if (!res.ok) throw new Error(`the collector answered ${res.status}`);
      this.counts.exported += batch.length;
    } catch (err) {
      this.counts.failed += batch.length;
      if (Date.now() - this.lastError > 60_000) {
        this.lastError = Date.now();
        log.warn('span export failed; spans dropped', { url: this.opts.url, spans: batch.length, err: err as Error });
      }
    }
  }

  async shutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}

/** `k1=v1,k2=v2` (OTEL_EXPORTER_OTLP_HEADERS; values percent-decoded) → a record. */
export function parseOtlpHeaders(value: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (value ?? '').split(',')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    out[decodeURIComponent(part.slice(0, i).trim())] = decodeURIComponent(part.slice(i + 1).trim());
  }
  return out;
}

/**
 * The tracer of a process, from the OpenTelemetry environment variables:
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL) or OTEL_EXPORTER_OTLP_ENDPOINT (the base:
 * `/v1/traces` is appended) turns the OTLP/HTTP exporter on; OTEL_EXPORTER_OTLP_HEADERS adds
 * headers (e.g. an API key); OTEL_SERVICE_NAME replaces `service`. Unset: no exporter.
 */
export function tracerFromEnv(service: string, env: Record<string, string | undefined> = process.env): Tracer {
  const name = env.OTEL_SERVICE_NAME || service;
  const full = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const url = full || (base ? `${base.replace(/\/+$/, '')}/v1/traces` : '');
  if (!url || env.OTEL_TRACES_EXPORTER === 'none') return new Tracer(name, null);
  return new Tracer(name, new OtlpHttpExporter({ url, service: name, headers: parseOtlpHeaders(env.OTEL_EXPORTER_OTLP_HEADERS) }));
}
