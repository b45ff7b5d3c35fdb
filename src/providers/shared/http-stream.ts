import { Agent, type Dispatcher } from 'undici';
import { estimateUsage, warmupEstimator } from './estimate.ts';
import { type SseEvent, SseParser } from './sse.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { abortError } from './abort.ts';
import { mapConnectError } from './upstream-errors.ts';

// The transport every streaming HTTP vendor shares: keep-alive connection pools, connect and
// overall timeouts, cancel, error bodies, SSE framing, "ended before it finished" detection. A
// vendor folder (Portkey style) supplies only its wire format as a VendorProtocol.
//
// undici's dispatcher API (the package, not Node's fetch): one handler callback per socket read,
// no IncomingMessage stream per response. Against a 10-token SSE answer at 500 requests/s it
// spends about a quarter less CPU per request than node:http with a keep-alive agent
// (`npx tsx bench/upstream-client.ts`), and it has a connect timeout of its own
// (UPSTREAM_CONNECT_TIMEOUT_MS).

export interface VendorProtocol {
  url(baseUrl: string): URL;
  headers(apiKey: string | null, bodyBytes: number): Record<string, string>;
  /** Request transform: our job → the vendor's request body (always streaming). */
  body(call: UpstreamCall): unknown;
  /** Per-request decoder of SSE `data` payloads; returns 'done' at the vendor's end marker. */
  streamDecoder(apiKey: string | null): { data(payload: string, out: AdapterEvent[]): 'done' | void };
  /** A whole (non-streamed) answer, for vendors that ignore `stream: true`. */
  completion(body: object, out: AdapterEvent[], apiKey: string | null): void;
  httpError(status: number, bodyText: string, headers: Record<string, string | string[] | undefined>, apiKey: string | null): UpstreamError;
  /** Authenticates a request whose credentials depend on it (a SigV4 signature, a minted token): the headers to send. */
  sign?(url: URL, headers: Record<string, string>, payload: Buffer, apiKey: string | null): Promise<Record<string, string>>;
  /** A binary event stream (Bedrock's application/vnd.amazon.eventstream) instead of SSE: its per-request decoder. */
  byteStreamDecoder?(apiKey: string | null): ByteStreamDecoder;
}

/** Decodes a binary event stream into adapter events as bytes arrive; throws the vendor's error event. */
export interface ByteStreamDecoder {
  push(chunk: Buffer, out: AdapterEvent[]): void;
  /** The body ended (a partial frame left over is an interrupted stream). */
  end(out: AdapterEvent[]): void;
}

/**
 * The stream decoder of an OpenAI-style SSE body: each data payload is one JSON chunk, `[DONE]`
 * ends it, and a vendor's stray non-JSON event is skipped.
 */
export function jsonChunkDecoder(onChunk: (chunk: object, out: AdapterEvent[], apiKey: string | null) => void): VendorProtocol['streamDecoder'] {
  return (key) => ({
    data(payload, out) {
      if (payload === '[DONE]') return 'done';
      let chunk: unknown;
      try {
        chunk = JSON.parse(payload);
      } catch {
        return;
      }
      if (chunk && typeof chunk === 'object') onChunk(chunk, out, key);
    },
  });
}

export interface HttpStreamAdapterOptions {
  /** From connection start to response headers' socket being connected. */
  connectTimeoutMs: number;
  /** Whole upstream call, first byte to last. */
  timeoutMs: number;
  /** Where api_key_env is looked up; process.env by default. */
  env?: Record<string, string | undefined>;
}

const MAX_ERROR_BODY = 64 * 1024;

/**
 * A streaming HTTP vendor: transport, timeouts, cancel and error bodies here; the wire format in
 * `protocol`, or chosen per call (a vendor API per job API: chat, embeddings, legacy completions).
 */
export function createHttpStreamAdapter(
  name: string,
  protocolOf: VendorProtocol | ((call: UpstreamCall) => VendorProtocol),
  opts: HttpStreamAdapterOptions,
): Adapter {
  const env = opts.env ?? process.env;
  // one connection pool per vendor origin, kept alive between requests; our own overall timeout
  // bounds a call (a reasoning model may think for minutes before its first byte)
  const agent = new Agent({ connect: { timeout: opts.connectTimeoutMs }, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
  return {
    name,
    async stream(call: UpstreamCall, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void> {
      const { baseUrl, key } = upstreamOf(call, env);
      if (signal.aborted) throw abortError(signal);
      const protocol = typeof protocolOf === 'function' ? protocolOf(call) : protocolOf;
      const url = protocol.url(baseUrl);
      const payload = Buffer.from(JSON.stringify(protocol.body(call)));
      let headers = protocol.headers(key, payload.length);
      if (protocol.sign) headers = await protocol.sign(url, headers, payload, key);
      if (signal.aborted) throw abortError(signal);
      const request: VendorRequest = { protocol, key, url, payload, headers };
      const control = new CallControl(signal, opts);
      try {
        await send(agent, request, call, control, emit);
      } finally {
        control.dispose();
      }
    },
    async countUsage(call: UpstreamCall, output: string) {
      return { usage: await estimateUsage(call, output), estimated: true };
    },
    warmup: warmupEstimator,
  };
}

/** The model's upstream base URL and API key (null: the vendor needs none); a 502 when either is missing. */
function upstreamOf(call: UpstreamCall, env: Record<string, string | undefined>): { baseUrl: string; key: string | null } {
  const { id, base_url, api_key_env } = call.model;
  if (!base_url) throw new UpstreamError(502, 'upstream_not_configured', `Model ${id} has no upstream base URL configured.`);
  let key: string | null = null;
  if (api_key_env) {
    // `env` holds only the variables named in WORKER_UPSTREAM_KEYS
    key = env[api_key_env] || null;
    if (!key) throw new UpstreamError(502, 'upstream_not_configured', `The upstream API key for model ${id} is not configured on this worker.`);
  }
  return { baseUrl: base_url, key };
}

/** One call's request in the vendor's wire format. */
interface VendorRequest {
  protocol: VendorProtocol;
  key: string | null;
  url: URL;
  payload: Buffer;
  headers: Record<string, string>;
}

/** Cancel (the caller's signal) and the overall timeout of one call, and the error either makes of a failure. */
class CallControl {
  /** Why the call was aborted, once it was. */
  why: 'cancel' | 'timeout' | undefined;
  /** Aborts the request on its connection (undici's, once connected). */
  abortRequest: ((err: Error) => void) | undefined;
  private readonly onCancel = () => this.abort('cancel');
  private readonly overall: NodeJS.Timeout;

  constructor(
    private readonly signal: AbortSignal,
    private readonly opts: HttpStreamAdapterOptions,
  ) {
    signal.addEventListener('abort', this.onCancel, { once: true });
    this.overall = setTimeout(() => this.abort('timeout'), opts.timeoutMs);
  }

  abort(why: 'cancel' | 'timeout'): void {
    if (!this.why) {
      this.why = why;
      this.abortRequest?.(new Error(why));
    }
  }

  /** The error a failure of the call becomes: the cancel, the timeout, or what went wrong while connecting or streaming. */
  fail(err: unknown, phase: 'connect' | 'stream'): Error {
    if (this.why === 'cancel') return abortError(this.signal);
    if (this.why === 'timeout') return new UpstreamError(504, 'upstream_timeout', `The upstream provider did not finish within ${this.opts.timeoutMs} ms.`);
    if (err instanceof UpstreamError) return err;
    if ((err as { code?: string } | null)?.code === 'UND_ERR_CONNECT_TIMEOUT')
      return new UpstreamError(
        502,
        'upstream_unreachable',
        `The upstream provider could not be reached (connect timeout after ${this.opts.connectTimeoutMs} ms).`,
      );
    return phase === 'connect'
      ? mapConnectError(err)
      : new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream was interrupted before it finished.');
  }

  dispose(): void {
    clearTimeout(this.overall);
    this.signal.removeEventListener('abort', this.onCancel);
  }
}

/** Sends the request and resolves once its response has been read to the end (every event emitted), or rejects with why not. */
function send(agent: Agent, req: VendorRequest, call: UpstreamCall, control: CallControl, emit: (ev: AdapterEvent) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const response = new ResponseReader(req.protocol, req.key, emit);
    const settle = (err?: unknown) => {
      if (settled) return;
      settled = true;
      if (err === undefined) resolve();
      else reject(err);
    };
    // onRequestSent: called by undici 6 once the body is written, missing from its types
    const handler: Dispatcher.DispatchHandlers & { onRequestSent(): void } = {
      onConnect(abortFn) {
        control.abortRequest = abortFn;
        if (control.why) abortFn(new Error(control.why));
      },
      // once the body is on its way the vendor may start reading the prompt (and bill it)
      onRequestSent() {
        call.sent = true;
      },
      onHeaders(statusCode, rawHeaders) {
        if (response.headers(statusCode, rawHeaders)) call.accepted = true;
        return true;
      },
      onData(chunk) {
        if (settled) return true;
        const vendorError = response.data(chunk);
        if (vendorError !== undefined) {
          settle(vendorError);
          control.abortRequest?.(new Error('vendor error event'));
        }
        return true;
      },
      onComplete() {
        if (!settled) settle(response.complete());
      },
      onError(err) {
        // an error status whose body was cut is still that status
        if (response.mode === 'error' && response.status > 0 && !control.why) return settle(response.httpError());
        settle(control.fail(err, response.status === 0 ? 'connect' : 'stream'));
      },
    };
    try {
      const { url, payload } = req;
      agent.dispatch({ origin: url.origin, path: url.pathname + url.search, method: 'POST', headers: req.headers, body: payload }, handler);
    } catch (err) {
      settle(control.fail(err, 'connect'));
    }
  });
}

/**
 * One response as undici hands it over: its status; the body of an error (up to MAX_ERROR_BODY)
 * or of a whole JSON answer; or, for a 2xx event stream, its events (EventStream).
 */
class ResponseReader {
  status = 0;
  mode: 'error' | 'json' | 'sse' = 'sse';
  private responseHeaders: Record<string, string> = {};
  private readonly body: Buffer[] = [];
  private bodySize = 0;
  private readonly stream: EventStream | ByteEventStream;

  constructor(
    private readonly protocol: VendorProtocol,
    private readonly key: string | null,
    private readonly emit: (ev: AdapterEvent) => void,
  ) {
    this.stream = protocol.byteStreamDecoder ? new ByteEventStream(protocol.byteStreamDecoder(key), emit) : new EventStream(protocol.streamDecoder(key), emit);
  }

  /** Status and headers; true when the vendor accepted the request (2xx). */
  headers(statusCode: number, rawHeaders: Buffer[] | string[] | null): boolean {
    this.status = statusCode;
    this.responseHeaders = headerRecord(rawHeaders);
    if (this.status < 200 || this.status >= 300) {
      this.mode = 'error';
      return false;
    }
    this.mode = (this.responseHeaders['content-type'] ?? '').includes('application/json') ? 'json' : 'sse';
    return true;
  }

  /** One socket read. Returns the error of a vendor error event in the stream (undefined: none). */
  data(chunk: Buffer): unknown {
    if (this.mode === 'sse') return this.stream.push(chunk);
    // an error body is kept up to MAX_ERROR_BODY; a whole JSON answer in full
    if (this.mode === 'json' || this.bodySize < MAX_ERROR_BODY) {
      const piece = this.mode === 'error' && this.bodySize + chunk.length > MAX_ERROR_BODY ? chunk.subarray(0, MAX_ERROR_BODY - this.bodySize) : chunk;
      this.body.push(piece);
      this.bodySize += piece.length;
    }
    return undefined;
  }

  /** The response ended. Returns what the call fails with (undefined: it succeeded, every event emitted). */
  complete(): unknown {
    // an error body is decoded once from all its bytes: a character split across two reads stays intact
    if (this.mode === 'error') return this.httpError();
    if (this.mode === 'json') return this.completion();
    return this.stream.end();
  }

  /** The vendor's error for this status and the body read so far. */
  httpError(): UpstreamError {
    return this.protocol.httpError(this.status, this.bodyText(), this.responseHeaders, this.key);
  }

  private bodyText(): string {
    return Buffer.concat(this.body, this.bodySize).toString('utf8');
  }

  /** A whole (non-streamed) answer, for vendors that ignore `stream: true`. */
  private completion(): unknown {
    let parsed: unknown;
    try {
      parsed = JSON.parse(this.bodyText());
    } catch {
      return new UpstreamError(502, 'upstream_error', 'The upstream provider sent an unreadable response.');
    }
    const events: AdapterEvent[] = [];
    try {
      this.protocol.completion(parsed as object, events, this.key);
    } catch (err) {
      return err;
    }
    for (const ev of events) this.emit(ev);
    return undefined;
  }
}

/**
 * The event stream of a 2xx response. Events are decoded and emitted as each socket read arrives.
 * A vendor error event ends the stream, but what the vendor sent before it (possibly in the same
 * read) comes first.
 */
class EventStream {
  private readonly decoder = new TextDecoder();
  private readonly parser = new SseParser();
  private readonly events: AdapterEvent[] = [];
  private finished = false;
  private sawDone = false;

  constructor(
    private readonly vendor: ReturnType<VendorProtocol['streamDecoder']>,
    private readonly emit: (ev: AdapterEvent) => void,
  ) {}

  /** One socket read. Returns the error of a vendor error event (undefined: none). */
  push(chunk: Buffer): unknown {
    return this.deliver(this.parser.push(this.decoder.decode(chunk, { stream: true })));
  }

  /** The response ended: a vendor error event in its last bytes, or a stream that ended before it finished, fails the call. */
  end(): unknown {
    const vendorError = this.deliver(this.parser.push(this.decoder.decode()).concat(this.parser.end()));
    if (vendorError !== undefined) return vendorError;
    if (!this.finished && !this.sawDone) return new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream ended before it finished.');
    return undefined;
  }

  private deliver(sse: SseEvent[]): unknown {
    let vendorError: unknown;
    for (const ev of sse) {
      if (this.sawDone) break;
      try {
        if (this.vendor.data(ev.data, this.events) === 'done') this.sawDone = true;
      } catch (err) {
        vendorError = err;
        break;
      }
    }
    coalesceDeltas(this.events);
    for (const ev of this.events) {
      if (ev.type === 'finish') this.finished = true;
      this.emit(ev);
    }
    this.events.length = 0;
    return vendorError;
  }
}

/** The binary event stream of a 2xx response: like EventStream, with the vendor's own framing. */
class ByteEventStream {
  private readonly events: AdapterEvent[] = [];
  private finished = false;

  constructor(
    private readonly vendor: ByteStreamDecoder,
    private readonly emit: (ev: AdapterEvent) => void,
  ) {}

  push(chunk: Buffer): unknown {
    return this.deliver(() => this.vendor.push(chunk, this.events));
  }

  end(): unknown {
    const vendorError = this.deliver(() => this.vendor.end(this.events));
    if (vendorError !== undefined) return vendorError;
    if (!this.finished) return new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream ended before it finished.');
    return undefined;
  }

  private deliver(decode: () => void): unknown {
    let vendorError: unknown;
    try {
      decode();
    } catch (err) {
      vendorError = err;
    }
    coalesceDeltas(this.events);
    for (const ev of this.events) {
      if (ev.type === 'finish') this.finished = true;
      this.emit(ev);
    }
    this.events.length = 0;
    return vendorError;
  }
}

/** undici's raw headers (name, value, name, value…) as a record of lower-case names. */
function headerRecord(raw: Buffer[] | string[] | null): Record<string, string> {
  const out: Record<string, string> = {};
  if (!raw) return out;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = raw[i]!.toString().toLowerCase();
    const v = raw[i + 1]!.toString();
    out[k] = k in out ? `${out[k]}, ${v}` : v;
  }
  return out;
}

/**
 * Merges consecutive content deltas that arrived in the same socket read into one. They reached
 * us together, so merging adds no latency; when the worker is behind it saves a frame, a NATS
 * message and a client write per token.
 */
export function coalesceDeltas(events: AdapterEvent[]): void {
  let w = 0;
  for (let r = 0; r < events.length; r++) {
    const ev = events[r]!;
    const prev = w > 0 ? events[w - 1] : undefined;
    if (ev.type === 'delta' && prev?.type === 'delta') events[w - 1] = { type: 'delta', content: prev.content + ev.content };
    else events[w++] = ev;
  }
  events.length = w;
}
