import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { LatencyHistogram, type HistogramSummary } from './histogram.ts';
import {
  type ChunkKind,
  classifyChunk,
  classifyCompletionChunk,
  classifyGeminiEvent,
  classifyMessagesEvent,
  classifyResponsesEvent,
  type SseEvent,
  SseParser,
} from './sse.ts';

// The load engine. One target at a time; the caller runs targets one after the other with the
// same options so their numbers compare.
//
// Open loop (`rate`): request i is due at t0 + i/rate whatever happened before; latency counts
// from that *intended* time, so a slow target (or a late runner) cannot hide its queueing
// (no coordinated omission). A due request is *dropped* (not sent, counted) when `maxInflight`
// requests are already open (k6's maxVUs), and *late* when it left more than `lateMs` after
// its due time (its latency still counts from the due time).
// Closed loop (`concurrency`): N loops, each sends its next request when the previous ends;
// latency counts from the actual send.
//
// Route: chat completions (default), POST /v1/responses (`route: 'responses'`: `input` instead
// of `messages`, and its events: a text delta is content, response.completed the end) or POST
// /v1/messages (`route: 'messages'`: Anthropic's body and events, message_stop the end), or POST
// /v1/completions (`route: 'completions'`: a prompt, legacy text chunks).
//
// A request succeeds with HTTP 200 and, streamed, a `[DONE]` after no error event; only
// successes enter the latency histograms. TTFT = first SSE data event whose delta.content is
// non-empty; gaps = time between consecutive content-bearing reads of the socket.

export interface Target {
  name: string;
  /** base URL ending in /v1 */
  url: string;
  /** several base URLs (e.g. two front doors): requests rotate over them like a round-robin balancer */
  urls?: string[];
  key?: string;
  /** several keys (e.g. one per tenant): requests rotate over them; overrides `key` */
  keys?: string[];
  model: string;
  /** more request headers (Anthropic's API straight at the mock: x-api-key, anthropic-version) */
  headers?: Record<string, string>;
}

export interface LoadOptions {
  mode: 'open' | 'closed';
  rate?: number;
  concurrency?: number;
  durationS: number;
  warmupS: number;
  stream: boolean;
  maxTokens?: number;
  prompt: string;
  timeoutMs: number;
  maxInflight: number;
  lateMs: number;
  client: 'http' | 'fetch';
  /** the public API the requests use (default chat) */
  route?: Route;
  /** Called when a request ends (warm-up included): its intended start and end time in epoch ms, the response's x-request-id. */
  onResult?: (r: { ok: boolean; intendedAt: number; endedAt: number; requestId: string | null }) => void;
  /** Called as the measured phase (after warm-up) starts and once it has ended: CPU sampling. */
  onMeasure?: (edge: 'start' | 'end') => void;
}

export interface TargetResult {
  target: string;
  url: string;
  model: string;
  mode: 'open' | 'closed';
  rate: number | null;
  concurrency: number | null;
  stream: boolean;
  client: 'http' | 'fetch';
  duration_s: number;
  /** due requests (open loop) or started requests (closed loop) */
  scheduled: number;
  sent: number;
  ok: number;
  dropped: number;
  late: number;
  achieved_rps: number;
  errors: { total: number; by_status: Record<string, number>; by_type: Record<string, number> };
  total_ms: HistogramSummary;
  ttft_ms: HistogramSummary;
  gap_ms: HistogramSummary;
  dispatch_lag_ms: HistogramSummary;
  content_chunks: number;
  max_inflight_seen: number;
  runner: { cpu_pct: number; event_loop_p99_ms: number };
  /** 1-minute load average of the machine at the start and end of the measured phase (other processes disturb a benchmark) */
  loadavg_1m: { start: number; end: number };
}

export type Route = 'chat' | 'responses' | 'messages' | 'completions' | 'gemini';

/** What a route's requests look like on the wire: path, how an SSE event counts, when a JSON answer failed. */
const ROUTE: Record<
  Route,
  { path: string | ((model: string, stream: boolean) => string); classify: (e: SseEvent) => ChunkKind; bodyFailed: (text: string) => boolean }
> = {
  chat: {
    path: '/chat/completions',
    classify: (e) => classifyChunk(e.data),
    bodyFailed: (text) => text.includes('"error"') && !text.includes('"choices"'),
  },
  completions: {
    path: '/completions',
    classify: (e) => classifyCompletionChunk(e.data),
    bodyFailed: (text) => !text.includes('"object":"text_completion"'),
  },
  responses: {
    path: '/responses',
    classify: (e) => classifyResponsesEvent(e.event),
    bodyFailed: (text) => !text.includes('"object":"response"'),
  },
  messages: {
    path: '/messages',
    classify: (e) => classifyMessagesEvent(e.event, e.data),
    bodyFailed: (text) => !text.includes('"type":"message"'),
  },
  // Google's Gemini API, at the origin (the target URL ends with /v1) with the model in the path
  gemini: {
    path: (model, stream) => `/../v1beta/models/${model}:${stream ? 'streamGenerateContent?alt=sse' : 'generateContent'}`,
    classify: (e) => classifyGeminiEvent(e.data),
    bodyFailed: (text) => !text.includes('"candidates"'),
  },
};

/** The route's path for this phase (Gemini's names the model and the method). */
function routePath(opts: Pick<LoadOptions, 'route' | 'stream'>, model: string): string {
  const path = ROUTE[opts.route ?? 'chat'].path;
  return typeof path === 'string' ? path : path(model, opts.stream);
}

class Collector {
  total = new LatencyHistogram();
  ttft = new LatencyHistogram();
  gap = new LatencyHistogram();
  lag = new LatencyHistogram();
  ok = 0;
  sent = 0;
  scheduled = 0;
  dropped = 0;
  late = 0;
  chunks = 0;
  byStatus: Record<string, number> = {};
  byType: Record<string, number> = {};
  errors = 0;
  inflight = 0;
  maxInflight = 0;
  error(type: string, status?: number) {
    this.errors++;
    this.byType[type] = (this.byType[type] ?? 0) + 1;
    if (status !== undefined) this.byStatus[String(status)] = (this.byStatus[String(status)] ?? 0) + 1;
  }
}

type Done = () => void;

/** Per-request state shared by both clients. */
class Req {
  firstAt = 0;
  lastAt = 0;
  sawDone = false;
  streamError = false;
  chunks = 0;
  gaps: number[] = [];
  finished = false;
  requestId: string | null = null;
  onResult: LoadOptions['onResult'];
  classify: (e: SseEvent) => ChunkKind = ROUTE.chat.classify;
  constructor(
    readonly c: Collector,
    readonly intended: number,
    readonly stream: boolean,
    private readonly done: Done,
  ) {}

  private report(ok: boolean) {
    if (this.onResult)
      this.onResult({ ok, intendedAt: performance.timeOrigin + this.intended, endedAt: performance.timeOrigin + performance.now(), requestId: this.requestId });
  }

  /** One read from the socket of a 200 streamed response: parse its events. */
  onStreamText(parser: SseParser, text: string) {
    const events = parser.push(text);
    if (events.length === 0) return;
    let content = false;
    for (const e of events) {
      const k = this.classify(e);
      if (k === 'content') {
        content = true;
        this.chunks++;
      } else if (k === 'done') this.sawDone = true;
      else if (k === 'error') this.streamError = true;
    }
    if (content) {
      const now = performance.now();
      if (this.firstAt === 0) this.firstAt = now;
      else this.gaps.push(now - this.lastAt);
      this.lastAt = now;
    }
  }

  finishOk() {
    if (this.finished) return;
    this.finished = true;
    const now = performance.now();
    const c = this.c;
    let ok = true;
    if (this.stream) {
      ok = false;
      if (this.streamError) c.error('stream_error_event');
      else if (!this.sawDone) c.error('stream_incomplete');
      else if (this.firstAt === 0) c.error('stream_no_content');
      else {
        ok = true;
        c.ok++;
        c.total.record(now - this.intended);
        c.ttft.record(this.firstAt - this.intended);
        for (const g of this.gaps) c.gap.record(g);
        c.chunks += this.chunks;
      }
    } else {
      c.ok++;
      c.total.record(now - this.intended);
    }
    this.report(ok);
    this.done();
  }

  fail(type: string, status?: number) {
    if (this.finished) return;
    this.finished = true;
    this.c.error(type, status);
    this.report(false);
    this.done();
  }
}

function errType(err: unknown, timedOut: boolean, midStream: boolean): string {
  if (timedOut) return 'timeout';
  const code = (err as NodeJS.ErrnoException)?.code ?? (err as { cause?: NodeJS.ErrnoException })?.cause?.code;
  const base = code ? `conn_${code}` : `conn_${(err as Error)?.message ?? 'error'}`;
  return midStream ? `aborted_${code ?? 'stream'}` : base;
}

interface Sender {
  send(req: Req): void;
  close(): void;
}

function httpSender(target: Target, body: string, opts: LoadOptions): Sender {
  const route = ROUTE[opts.route ?? 'chat'];
  const path = routePath(opts, target.model);
  const u = new URL(target.url.replace(/\/$/, '') + path);
  const mod = u.protocol === 'https:' ? https : http;
  const agent = new mod.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 65536, scheduling: 'lifo' });
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    accept: opts.stream ? 'text/event-stream' : 'application/json',
    ...target.headers,
  };
  const keys = target.keys?.length ? target.keys : target.key ? [target.key] : [undefined];
  const bases = (target.urls?.length ? target.urls : [target.url]).map((b) => new URL(b.replace(/\/$/, '') + path));
  // keys × bases, interleaved so that consecutive requests change base URL (and key)
  const reqOptsByKey: http.RequestOptions[] = [];
  for (let i = 0; i < keys.length * bases.length; i++) {
    const k = keys[i % keys.length];
    const b = bases[i % bases.length]!;
    reqOptsByKey.push({
      agent,
      host: b.hostname,
      port: b.port || (b.protocol === 'https:' ? 443 : 80),
      path: b.pathname + b.search,
      method: 'POST',
      headers: k ? { ...headers, authorization: `Bearer ${k}` } : headers,
    });
  }
  void u;
  let next = 0;
  return {
    send(r) {
      const reqOpts = reqOptsByKey[next++ % reqOptsByKey.length]!;
      let timedOut = false;
      let started = false;
      const hr = mod.request(reqOpts, (res) => {
        started = true;
        const status = res.statusCode ?? 0;
        const rid = res.headers['x-request-id'];
        if (typeof rid === 'string') r.requestId = rid;
        res.setEncoding('utf8');
        res.on('error', (err) => r.fail(errType(err, timedOut, true)));
        res.on('aborted', () => r.fail(errType(null, timedOut, true)));
        if (status !== 200) {
          res.resume();
          res.on('end', () => {
            clearTimeout(timer);
            r.fail(`http_${status}`, status);
          });
          return;
        }
        if (opts.stream) {
          const parser = new SseParser();
          res.on('data', (t: string) => r.onStreamText(parser, t));
        } else {
          let text = '';
          res.on('data', (t: string) => (text += t));
          res.on('end', () => {
            if (route.bodyFailed(text)) r.streamError = true;
          });
        }
        res.on('end', () => {
          clearTimeout(timer);
          if (!opts.stream && r.streamError) r.fail('body_error');
          else r.finishOk();
        });
      });
      const timer = setTimeout(() => {
        timedOut = true;
        hr.destroy(new Error('timeout'));
      }, opts.timeoutMs);
      hr.on('error', (err) => {
        clearTimeout(timer);
        r.fail(errType(err, timedOut, started));
      });
      hr.end(body);
    },
    close() {
      agent.destroy();
    },
  };
}

function fetchSender(target: Target, body: string, opts: LoadOptions): Sender {
  const route = ROUTE[opts.route ?? 'chat'];
  const url = new URL(target.url.replace(/\/$/, '') + routePath(opts, target.model)).href;
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: opts.stream ? 'text/event-stream' : 'application/json',
    ...target.headers,
  };
  const keys = target.keys?.length ? target.keys : target.key ? [target.key] : [];
  let next = 0;
  return {
    send(r) {
      const h = keys.length ? { ...headers, authorization: `Bearer ${keys[next++ % keys.length]}` } : headers;
      const ac = new AbortController();
      let timedOut = false;
      let started = false;
      const timer = setTimeout(() => {
        timedOut = true;
        ac.abort();
      }, opts.timeoutMs);
      (async () => {
        const res = await fetch(url, { method: 'POST', headers: h, body, signal: ac.signal });
        started = true;
        r.requestId = res.headers.get('x-request-id');
        if (res.status !== 200) {
          await res.arrayBuffer();
          return r.fail(`http_${res.status}`, res.status);
        }
        if (opts.stream) {
          const parser = new SseParser();
          const dec = new TextDecoder();
          const reader = res.body!.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            r.onStreamText(parser, dec.decode(value, { stream: true }));
          }
          r.finishOk();
        } else {
          const text = await res.text();
          if (route.bodyFailed(text)) r.fail('body_error');
          else r.finishOk();
        }
      })()
        .catch((err) => r.fail(errType(err, timedOut, started)))
        .finally(() => clearTimeout(timer));
    },
    close() {},
  };
}

export function requestBody(model: string, opts: Pick<LoadOptions, 'stream' | 'maxTokens' | 'prompt' | 'route'>): string {
  if (opts.route === 'messages') {
    return JSON.stringify({ model, messages: [{ role: 'user', content: opts.prompt }], stream: opts.stream, max_tokens: opts.maxTokens || 1024 });
  }
  if (opts.route === 'gemini') {
    const b: Record<string, unknown> = { contents: [{ role: 'user', parts: [{ text: opts.prompt }] }] };
    if (opts.maxTokens) b.generationConfig = { maxOutputTokens: opts.maxTokens };
    return JSON.stringify(b);
  }
  if (opts.route === 'completions') {
    const b: Record<string, unknown> = { model, prompt: opts.prompt, stream: opts.stream, max_tokens: opts.maxTokens || 256 };
    if (opts.stream) b.stream_options = { include_usage: true };
    return JSON.stringify(b);
  }
  if (opts.route === 'responses') {
    const b: Record<string, unknown> = { model, input: opts.prompt, stream: opts.stream, store: false };
    if (opts.maxTokens) b.max_output_tokens = opts.maxTokens;
    return JSON.stringify(b);
  }
  const b: Record<string, unknown> = { model, messages: [{ role: 'user', content: opts.prompt }], stream: opts.stream };
  if (opts.stream) b.stream_options = { include_usage: true };
  if (opts.maxTokens) b.max_tokens = opts.maxTokens;
  return JSON.stringify(b);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Runs one phase (warm-up or measured) and resolves when every sent request has ended. */
async function phase(sender: Sender, c: Collector, opts: LoadOptions, durationS: number, stream: boolean): Promise<number> {
  const started = performance.now();
  let idle: (() => void) | null = null;
  const onDone = () => {
    c.inflight--;
    if (c.inflight === 0 && idle) idle();
  };
  const fire = (intended: number) => {
    c.sent++;
    c.inflight++;
    if (c.inflight > c.maxInflight) c.maxInflight = c.inflight;
    const r = new Req(c, intended, stream, onDone);
    r.onResult = opts.onResult;
    r.classify = ROUTE[opts.route ?? 'chat'].classify;
    sender.send(r);
  };

  if (opts.mode === 'open') {
    const rate = opts.rate!;
    const total = Math.round(rate * durationS);
    const interval = 1000 / rate;
    const t0 = performance.now() + 5;
    let i = 0;
    await new Promise<void>((resolve) => {
      const tick = () => {
        const now = performance.now();
        while (i < total && t0 + i * interval <= now) {
          const intended = t0 + i * interval;
          i++;
          c.scheduled++;
          if (c.inflight >= opts.maxInflight) {
            c.dropped++;
            continue;
          }
          const lag = now - intended;
          c.lag.record(lag);
          if (lag > opts.lateMs) c.late++;
          fire(intended);
        }
        if (i >= total) return resolve();
        setTimeout(tick, Math.max(0, Math.floor(t0 + i * interval - performance.now())));
      };
      setTimeout(tick, 5);
    });
  } else {
    const end = performance.now() + durationS * 1000;
    const loops: Promise<void>[] = [];
    for (let k = 0; k < opts.concurrency!; k++) {
      loops.push(
        (async () => {
          while (performance.now() < end) {
            c.scheduled++;
            await new Promise<void>((resolve) => {
              c.sent++;
              c.inflight++;
              if (c.inflight > c.maxInflight) c.maxInflight = c.inflight;
              const r = new Req(c, performance.now(), stream, () => {
                c.inflight--;
                resolve();
              });
              r.onResult = opts.onResult;
              r.classify = ROUTE[opts.route ?? 'chat'].classify;
              sender.send(r);
            });
          }
        })(),
      );
    }
    await Promise.all(loops);
  }
  if (c.inflight > 0) await new Promise<void>((r) => (idle = r));
  return (performance.now() - started) / 1000;
}

/** Runs warm-up (not recorded) then the measured phase against one target. */
export async function runTarget(target: Target, opts: LoadOptions): Promise<TargetResult> {
  const body = requestBody(target.model, opts);
  const sender = opts.client === 'fetch' ? fetchSender(target, body, opts) : httpSender(target, body, opts);
  try {
    if (opts.warmupS > 0) await phase(sender, new Collector(), opts, opts.warmupS, opts.stream);
    await sleep(200);
    const c = new Collector();
    const loop = monitorEventLoopDelay({ resolution: 5 });
    loop.enable();
    const load0 = os.loadavg()[0]!;
    const cpu0 = process.cpuUsage();
    opts.onMeasure?.('start');
    const wall = await phase(sender, c, opts, opts.durationS, opts.stream);
    opts.onMeasure?.('end');
    const cpu = process.cpuUsage(cpu0);
    loop.disable();
    return {
      target: target.name,
      url: target.url,
      model: target.model,
      mode: opts.mode,
      rate: opts.mode === 'open' ? opts.rate! : null,
      concurrency: opts.mode === 'closed' ? opts.concurrency! : null,
      stream: opts.stream,
      client: opts.client,
      duration_s: Math.round(wall * 1000) / 1000,
      scheduled: c.scheduled,
      sent: c.sent,
      ok: c.ok,
      dropped: c.dropped,
      late: c.late,
      achieved_rps: Math.round((c.ok / opts.durationS) * 10) / 10,
      errors: { total: c.errors, by_status: c.byStatus, by_type: c.byType },
      total_ms: c.total.summary(),
      ttft_ms: c.ttft.summary(),
      gap_ms: c.gap.summary(),
      dispatch_lag_ms: c.lag.summary(),
      content_chunks: c.chunks,
      max_inflight_seen: c.maxInflight,
      runner: {
        cpu_pct: Math.round(((cpu.user + cpu.system) / 1000 / (wall * 1000)) * 1000) / 10,
        event_loop_p99_ms: Math.round((loop.percentile(99) / 1e6) * 1000) / 1000,
      },
      loadavg_1m: { start: Math.round(load0 * 100) / 100, end: Math.round(os.loadavg()[0]! * 100) / 100 },
    };
  } finally {
    sender.close();
  }
}
