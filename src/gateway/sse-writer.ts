import type { HttpResponse } from './uws.ts';

/**
 * Writes SSE to one client with bounded memory.
 *
 * Chunks written in one turn of the event loop (frames delivered together: a vendor read that
 * held the last token and the finish, a worker's frames that came in one NATS read) go to the
 * socket as one send, at the end of that turn (a microtask: before any I/O, so no token waits).
 * A send costs this kind of machine tens of µs (a syscall, and waking the reader).
 *
 * uWS buffers whatever `write` is given; once a write reports backpressure we stop handing it
 * data and queue here instead, draining on `onWritable`. A client that lets more than `limit`
 * bytes pile up is cut off (`onOverflow`).
 */
export class SseWriter {
  private queue: Array<string | Uint8Array> = [];
  private queuedBytes = 0;
  private blocked = false;
  private endPending = false;
  private closed = false;
  /** written this turn, not yet handed to uWS */
  private pending: Array<string | Uint8Array> = [];
  /** runs in the first send's cork, before its data (status and headers) */
  private before: (() => void) | undefined;
  private scheduled = false;
  private chunk: string | Uint8Array = '';
  private written = true;
  private ending = false;
  private readonly corked = () => {
    const before = this.before;
    this.before = undefined;
    before?.();
    if (this.ending) this.res.end(this.chunk);
    else this.written = this.res.write(this.chunk);
  };
  private readonly flush = () => {
    this.scheduled = false;
    if (this.closed || this.pending.length === 0) return;
    this.send(false);
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
    this.pending = [];
  }

  /** `before` (first write only) runs in the same cork as the data: the status and headers go out with it. */
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
    if (before) this.before = before;
    this.pending.push(chunk);
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(this.flush);
    }
  }

  end(last = ''): void {
    if (this.closed) return;
    if (this.blocked) {
      if (last) this.queue.push(last);
      this.endPending = true;
      return;
    }
    this.closed = true;
    this.pending.push(last);
    this.send(true);
  }

  /** What was written this turn, in one cork: one send. */
  private send(end: boolean): void {
    const p = this.pending;
    this.pending = [];
    this.chunk = p.length === 1 ? p[0]! : join(p);
    this.ending = end;
    this.res.cork(this.corked);
    this.chunk = '';
    if (!end && !this.written) this.block();
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

function join(parts: Array<string | Uint8Array>): string | Buffer {
  if (parts.every((p) => typeof p === 'string')) return parts.join('');
  return Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)));
}
