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

/** A streaming HTTP vendor: transport, timeouts, cancel and error bodies here; the wire format in `protocol`. */
export function createHttpStreamAdapter(name: string, protocol: VendorProtocol, opts: HttpStreamAdapterOptions): Adapter {
  const env = opts.env ?? process.env;
  // one connection pool per vendor origin, kept alive between requests; our own overall timeout
  // bounds a call (a reasoning model may think for minutes before its first byte)
  const agent = new Agent({ connect: { timeout: opts.connectTimeoutMs }, keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
  return {
    name,
    async stream(call: UpstreamCall, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void> {
      const { id, base_url, api_key_env } = call.model;
      if (!base_url) throw new UpstreamError(502, 'upstream_not_configured', `Model ${id} has no upstream base URL configured.`);
      let key: string | null = null;
      if (api_key_env) {
        // `env` holds only the variables named in WORKER_UPSTREAM_KEYS
        key = env[api_key_env] || null;
        if (!key) throw new UpstreamError(502, 'upstream_not_configured', `The upstream API key for model ${id} is not configured on this worker.`);
      }
      if (signal.aborted) throw abortError(signal);

      const url = protocol.url(base_url);
      const payload = Buffer.from(JSON.stringify(protocol.body(call)));
      let why: 'cancel' | 'timeout' | undefined;
      let abortRequest: ((err: Error) => void) | undefined;
      const abort = (w: typeof why) => {
        if (!why) {
          why = w;
          abortRequest?.(new Error(w));
        }
      };
      const onCancel = () => abort('cancel');
      signal.addEventListener('abort', onCancel, { once: true });
      const overall = setTimeout(() => abort('timeout'), opts.timeoutMs);
      const fail = (err: unknown, phase: 'connect' | 'stream'): Error => {
        if (why === 'cancel') return abortError(signal);
        if (why === 'timeout') return new UpstreamError(504, 'upstream_timeout', `The upstream provider did not finish within ${opts.timeoutMs} ms.`);
        if (err instanceof UpstreamError) return err;
        if ((err as { code?: string } | null)?.code === 'UND_ERR_CONNECT_TIMEOUT')
          return new UpstreamError(
            502,
            'upstream_unreachable',
            `The upstream provider could not be reached (connect timeout after ${opts.connectTimeoutMs} ms).`,
          );
        return phase === 'connect'
          ? mapConnectError(err)
          : new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream was interrupted before it finished.');
      };

      try {
        await new Promise<void>((resolve, reject) => {
          let settled = false;
          let status = 0;
          let headers: Record<string, string> = {};
          let mode: 'error' | 'json' | 'sse' = 'sse';
          const body: Buffer[] = [];
          let bodySize = 0;
          const decoder = new TextDecoder();
          const parser = new SseParser();
          const vendor = protocol.streamDecoder(key);
          const events: AdapterEvent[] = [];
          let finished = false;
          let sawDone = false;
          const settle = (err?: unknown) => {
            if (settled) return;
            settled = true;
            if (err === undefined) resolve();
            else reject(err);
          };
          // Events are decoded and emitted as each socket read arrives. A vendor error event ends
          // the stream, but what the vendor sent before it (possibly in the same read) comes first.
          const deliver = (sse: SseEvent[]): unknown => {
            let vendorError: unknown;
            for (const ev of sse) {
              if (sawDone) break;
              try {
                if (vendor.data(ev.data, events) === 'done') sawDone = true;
              } catch (err) {
                vendorError = err;
                break;
              }
            }
            coalesceDeltas(events);
            for (const ev of events) {
              if (ev.type === 'finish') finished = true;
              emit(ev);
            }
            events.length = 0;
            return vendorError;
          };
          // onRequestSent: called by undici 6 once the body is written, missing from its types
          const handler: Dispatcher.DispatchHandlers & { onRequestSent(): void } = {
            onConnect(abortFn) {
              abortRequest = abortFn;
              if (why) abortFn(new Error(why));
            },
            // once the body is on its way the vendor may start reading the prompt (and bill it)
            onRequestSent() {
              call.sent = true;
            },
            onHeaders(statusCode, rawHeaders) {
              status = statusCode;
              headers = headerRecord(rawHeaders);
              if (status < 200 || status >= 300) mode = 'error';
              else {
                call.accepted = true;
                mode = (headers['content-type'] ?? '').includes('application/json') ? 'json' : 'sse';
              }
              return true;
            },
            onData(chunk) {
              if (settled) return true;
              if (mode !== 'sse') {
                // an error body is kept up to MAX_ERROR_BODY; a whole JSON answer in full
                if (mode === 'json' || bodySize < MAX_ERROR_BODY) {
                  const piece = mode === 'error' && bodySize + chunk.length > MAX_ERROR_BODY ? chunk.subarray(0, MAX_ERROR_BODY - bodySize) : chunk;
                  body.push(piece);
                  bodySize += piece.length;
                }
                return true;
              }
              const vendorError = deliver(parser.push(decoder.decode(chunk, { stream: true })));
              if (vendorError !== undefined) {
                settle(vendorError);
                abortRequest?.(new Error('vendor error event'));
              }
              return true;
            },
            onComplete() {
              if (settled) return;
              if (mode === 'error') {
                // decoded once from all its bytes: a character split across two reads stays intact
                return settle(protocol.httpError(status, Buffer.concat(body, bodySize).toString('utf8'), headers, key));
              }
              if (mode === 'json') {
                let parsed: unknown;
                try {
                  parsed = JSON.parse(Buffer.concat(body, bodySize).toString('utf8'));
                } catch {
                  return settle(new UpstreamError(502, 'upstream_error', 'The upstream provider sent an unreadable response.'));
                }
                try {
                  protocol.completion(parsed as object, events, key);
                } catch (err) {
                  return settle(err);
                }
                for (const ev of events) emit(ev);
                return settle();
              }
              const vendorError = deliver(parser.push(decoder.decode()).concat(parser.end()));
              if (vendorError !== undefined) return settle(vendorError);
              if (!finished && !sawDone) return settle(new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream ended before it finished.'));
              settle();
            },
            onError(err) {
              // an error status whose body was cut is still that status
              if (mode === 'error' && status > 0 && !why)
                return settle(protocol.httpError(status, Buffer.concat(body, bodySize).toString('utf8'), headers, key));
              settle(fail(err, status === 0 ? 'connect' : 'stream'));
            },
          };
          try {
            agent.dispatch(
              {
                origin: url.origin,
                path: url.pathname + url.search,
                method: 'POST',
                headers: protocol.headers(key, payload.length),
                body: payload,
              },
              handler,
            );
          } catch (err) {
            settle(fail(err, 'connect'));
          }
        });
      } finally {
        clearTimeout(overall);
        signal.removeEventListener('abort', onCancel);
      }
    },
    async countUsage(call: UpstreamCall, output: string) {
      return { usage: await estimateUsage(call, output), estimated: true };
    },
    warmup: warmupEstimator,
  };
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
