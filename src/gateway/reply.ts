import { type ExtendedDelta, payloadText } from '../bus/frames.ts';
import { CatracaError } from '../errors.ts';
import { createLogger } from '../log.ts';
import { Collected } from '../protocols/collector.ts';
import type { Ending, Protocol, ResponseEncoder } from '../protocols/types.ts';
import type { GatewayMetrics } from './metrics.ts';
import { KEEP_ALIVE_HINT, publicError, type ResponseState, sendJson } from './respond.ts';
import { SseWriter } from './sse-writer.ts';

const log = createLogger('gateway');

/**
 * The answer to one request of any protocol, as the protocol's encoder writes it: streamed (SSE,
 * the status and headers with its first bytes) or collected and sent whole at the end; or the
 * error, in the protocol's shape, before or in the middle of a stream. Each method that ends the
 * answer returns the status it was counted under.
 */
export class Reply {
  /** SSE headers sent */
  started = false;
  streaming = false;
  /** the answering model's encoder (a new one for each model tried) */
  encoder!: ResponseEncoder;
  /** x-ratelimit-* headers, sent on every answer once admission has counted the request */
  readonly headers: Record<string, string>;
  private sse?: SseWriter;
  private readonly collected = new Collected();

  constructor(
    private readonly s: ResponseState,
    private readonly protocol: Pick<Protocol, 'errorBody' | 'responseHeaders'>,
    private readonly bufferLimit: number,
    /** the client reads too slowly (its buffer passed `bufferLimit`): the connection is closed after this */
    private readonly onTooSlow: () => void,
    private readonly metrics?: GatewayMetrics,
  ) {
    this.headers = protocol.responseHeaders?.(s.requestId) ?? {};
  }

  /** The client went away: nothing may touch the response any more. */
  aborted(): void {
    this.sse?.markAborted();
  }

  /** A token of text: the worker's JSON string literal goes into the chunk as bytes (the hot path). */
  text(payload: Uint8Array): void {
    if (this.streaming) this.send(this.encoder.text(payload));
    else this.collected.text(JSON.parse(payloadText(payload)) as string);
  }

  delta(d: ExtendedDelta): void {
    if (!this.streaming) return this.collected.delta(d);
    const chunk = this.encoder.delta(d);
    if (chunk) this.send(chunk);
  }

  /** A piece of a whole body (embeddings), kept for the end. */
  bodyPiece(piece: string): void {
    this.collected.bodyPiece(piece);
  }

  keepalive(): void {
    if (this.streaming) this.send(this.encoder.keepalive());
  }

  /** Work the end waits for (the protocol's `beforeEnd`), if any. */
  beforeEnd(end: Ending): Promise<void> | undefined {
    return this.encoder.beforeEnd?.(this.collected, end);
  }

  /** Sends streamed bytes; the first go out with the status, the headers and the stream's opening in one write. */
  private send(chunk: string | Uint8Array): void {
    if (this.started) this.sse?.write(chunk);
    else this.startStream(chunk);
  }

  private startStream(first?: string | Uint8Array): void {
    if (this.started || this.s.aborted) return;
    this.started = true;
    const s = this.s;
    const res = s.res;
    this.sse = new SseWriter(res, this.bufferLimit, () => {
      log.warn('client too slow; cancelling', { request_id: s.requestId });
      this.onTooSlow();
      s.done = true;
      res.close();
    });
    const open = this.encoder.open();
    const body = first === undefined ? open : typeof first === 'string' ? open + first : Buffer.concat([Buffer.from(open), first]);
    this.sse.write(body, () => {
      res.writeStatus('200 OK');
      res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
      res.writeHeader('cache-control', 'no-cache');
      res.writeHeader('x-request-id', s.requestId);
      res.writeHeader('x-accel-buffering', 'no');
      // a stream begun while its door drains tells the client not to reuse the connection (the
      // balancer sends its next request to another door); uWS's own end(…, true) cannot say so
      // once the headers are out
      if (s.closeConnection) res.writeHeader('connection', 'close');
      else res.writeHeader('keep-alive', KEEP_ALIVE_HINT);
      for (const k in this.headers) res.writeHeader(k, this.headers[k]);
    });
  }

  /** The answer's end: the stream's close, or the whole body (or the error a whole body can turn out to be). */
  end(end: Ending): number {
    if (this.streaming) {
      this.startStream();
      this.sse?.end(this.encoder.close(end));
      this.s.done = true;
      return 200;
    }
    let body: unknown;
    try {
      body = this.encoder.body(this.collected, end); // a whole body (embeddings) is checked there
    } catch (err) {
      return this.fail(err);
    }
    sendJson(this.s, 200, body, this.headers);
    return 200;
  }

  /** The error, in the protocol's shape: as the response, or as the stream's last event once it started. */
  fail(err: unknown): number {
    const e = publicError(err);
    if (e.status === 500) log.error('request failed', { request_id: this.s.requestId, err: err as Error });
    else if (!(err instanceof CatracaError)) log.warn('request refused: database', { request_id: this.s.requestId, code: e.code, err: err as Error });
    if (this.started) {
      this.metrics?.midStreamError();
      this.sse?.end(this.encoder.fail(e));
      this.s.done = true;
      return 200;
    }
    const answer = this.protocol.errorBody(e);
    const status = answer.status ?? e.status;
    sendJson(this.s, status, answer.body, { ...this.headers, ...e.headers, ...answer.headers });
    return status;
  }
}
