import type { HttpResponse } from '../uws.ts';

/**
 * Writes SSE to one client with bounded memory. uWS buffers whatever `write` is given; once a
 * write reports backpressure we stop handing it data and queue here instead, draining on
 * `onWritable`. A client that lets more than `limit` bytes pile up is cut off (`onOverflow`).
 */
export class SseWriter {
  private queue: Array<string | Uint8Array> = [];
  private queuedBytes = 0;
  private blocked = false;
  private endPending = false;
  private closed = false;
  // one write per token: the corked callback is made once, not per chunk
  private chunk: string | Uint8Array = '';
  private before: (() => void) | undefined;
  private written = true;
  private readonly corkedWrite = () => {
    this.before?.();
    this.written = this.res.write(this.chunk);
  };

  constructor(
    private res: HttpResponse,
    private limit: number,
    private onOverflow: () => void,
  ) {}

  /** Bytes waiting in JS for the socket to drain. */
  get queued(): number {
    return this.queuedBytes;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Call after the client aborted: nothing may touch `res` any more. */
  markAborted(): void {
    this.closed = true;
    this.queue = [];
  }

  /**
   * `before` runs in the same cork, just before the chunk is written: the status and headers go
   * out with the first chunk in one send (only for the first write, when nothing can be queued).
   */
  write(chunk: string | Uint8Array, before?: () => void): void {
    if (this.closed || this.endPending) return;
    if (this.blocked) {
      this.queue.push(chunk);
      this.queuedBytes += chunk.length;
      if (this.queuedBytes > this.limit) {
        this.closed = true;
        this.queue = [];
        this.onOverflow();
      }
      return;
    }
    this.chunk = chunk;
    this.before = before;
    this.res.cork(this.corkedWrite);
    this.chunk = '';
    this.before = undefined;
    if (!this.written) this.block();
  }

  end(last = ''): void {
    if (this.closed) return;
    if (this.blocked) {
      if (last) this.queue.push(last);
      this.endPending = true;
      return;
    }
    this.closed = true;
    this.res.cork(() => this.res.end(last));
  }

  private block(): void {
    this.blocked = true;
    this.res.onWritable(() => {
      if (this.closed) return true;
      while (this.queue.length) {
        const chunk = this.queue.shift()!;
        this.queuedBytes -= chunk.length;
        if (!this.res.write(chunk)) return false;
      }
      this.blocked = false;
      if (this.endPending) {
        this.closed = true;
        this.res.end();
      }
      return true;
    });
  }
}
