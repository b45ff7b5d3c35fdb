import http from 'node:http';
import https from 'node:https';
import { estimateUsage, warmupEstimator } from './estimate.ts';
import { type SseEvent, SseParser } from './sse.ts';
import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { abortError } from './abort.ts';
import { mapConnectError } from './upstream-errors.ts';

// The transport every streaming HTTP vendor shares: keep-alive agents, connect and overall
// timeouts, cancel, error bodies, SSE framing, "ended before it finished" detection. A vendor
// folder (Portkey style) supplies only its wire format as a VendorProtocol.

// node:http with keep-alive agents rather than global fetch: Node 20 ships no public way to set
// undici's connect timeout without the undici package, and we want UPSTREAM_CONNECT_TIMEOUT_MS.
export const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo', keepAliveMsecs: 30_000 }),
  https: new https.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo', keepAliveMsecs: 30_000 }),
};

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
      const ctl = new AbortController();
      let why: 'cancel' | 'timeout' | 'connect_timeout' | undefined;
      const abort = (w: typeof why) => {
        if (!why) {
          why = w;
          ctl.abort(w === 'cancel' ? signal.reason : new Error(w));
        }
      };
      const onCancel = () => abort('cancel');
      signal.addEventListener('abort', onCancel, { once: true });
      const overall = setTimeout(() => abort('timeout'), opts.timeoutMs);
      let connectTimer: NodeJS.Timeout | undefined;
      let complete = false;
      const fail = (err: unknown, phase: 'connect' | 'stream'): Error => {
        if (why === 'cancel') return abortError(signal);
        if (why === 'timeout') return new UpstreamError(504, 'upstream_timeout', `The upstream provider did not finish within ${opts.timeoutMs} ms.`);
        if (why === 'connect_timeout')
          return new UpstreamError(
            502,
            'upstream_unreachable',
            `The upstream provider could not be reached (connect timeout after ${opts.connectTimeoutMs} ms).`,
          );
        if (err instanceof UpstreamError) return err;
        return phase === 'connect'
          ? mapConnectError(err)
          : new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream was interrupted before it finished.');
      };

      try {
        let res: http.IncomingMessage;
        try {
          res = await new Promise<http.IncomingMessage>((resolve, reject) => {
            const mod = url.protocol === 'https:' ? https : http;
            const req = mod.request(url, {
              method: 'POST',
              headers: protocol.headers(key, payload.length),
              agent: url.protocol === 'https:' ? agents.https : agents.http,
              signal: ctl.signal,
            });
            req.once('socket', (sock) => {
              if ((sock as { connecting?: boolean }).connecting) {
                connectTimer = setTimeout(() => abort('connect_timeout'), opts.connectTimeoutMs);
                sock.once('connect', () => clearTimeout(connectTimer));
                sock.once('secureConnect', () => clearTimeout(connectTimer));
              }
            });
            req.once('response', resolve);
            req.once('error', reject);
            // once the body is on its way the vendor may start reading the prompt (and bill it)
            req.once('finish', () => (call.sent = true));
            req.end(payload);
          });
        } catch (err) {
          throw fail(err, 'connect');
        } finally {
          clearTimeout(connectTimer);
        }

        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) {
          let text = '';
          try {
            text = await readText(res, MAX_ERROR_BODY);
          } catch {
            /* the status is what matters */
          }
          throw protocol.httpError(status, text, res.headers, key);
        }
        call.accepted = true;

        const events: AdapterEvent[] = [];
        const ctype = String(res.headers['content-type'] ?? '');
        if (ctype.includes('application/json')) {
          let text = '';
          try {
            text = await readText(res, Infinity);
          } catch (err) {
            throw fail(err, 'stream');
          }
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            throw new UpstreamError(502, 'upstream_error', 'The upstream provider sent an unreadable response.');
          }
          protocol.completion(parsed as object, events, key);
          complete = true;
          for (const ev of events) emit(ev);
          return;
        }

        // Events are decoded and emitted as each socket read arrives (no async iteration per
        // token: one 'data' callback per read). A vendor error event ends the stream, but what
        // the vendor sent before it (possibly in the same read) is delivered first.
        res.setEncoding('utf8');
        const parser = new SseParser();
        const decoder = protocol.streamDecoder(key);
        await new Promise<void>((resolve, reject) => {
          let finished = false;
          let sawDone = false;
          let settled = false;
          const end = (err?: unknown) => {
            if (settled) return;
            settled = true;
            if (err !== undefined) {
              reject(err);
              return;
            }
            complete = true;
            if (!finished && !sawDone) reject(new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream ended before it finished.'));
            else resolve();
          };
          const deliver = (sse: SseEvent[]): unknown => {
            let vendorError: unknown;
            for (const ev of sse) {
              if (sawDone) break;
              try {
                if (decoder.data(ev.data, events) === 'done') sawDone = true;
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
          res.on('data', (text: string) => {
            if (settled) return;
            const vendorError = deliver(parser.push(text));
            if (vendorError !== undefined) {
              end(vendorError);
              res.destroy();
            }
          });
          res.once('end', () => {
            const vendorError = deliver(parser.end());
            end(vendorError);
          });
          res.once('error', (err) => end(fail(err, 'stream')));
          res.once('close', () => {
            if (!settled && !res.complete) end(fail(new Error('closed'), 'stream'));
          });
        });
      } finally {
        clearTimeout(overall);
        signal.removeEventListener('abort', onCancel);
        // Leaving early (cancel, consumer stopped): drop the upstream connection.
        if (!complete && !ctl.signal.aborted) ctl.abort(new Error('done'));
      }
    },
    async countUsage(call: UpstreamCall, output: string) {
      return { usage: await estimateUsage(call, output), estimated: true };
    },
    warmup: warmupEstimator,
  };
}

/**
 * A body as text, decoded once from all its bytes (a multi-byte character split across two
 * chunks, like "ç" in "ção", stays intact), at most `limit` bytes kept.
 */
async function readText(res: http.IncomingMessage, limit: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of res as AsyncIterable<Buffer>) {
    if (size >= limit) continue;
    const piece = size + c.length > limit ? c.subarray(0, limit - size) : c;
    parts.push(piece);
    size += piece.length;
  }
  return Buffer.concat(parts, size).toString('utf8');
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
