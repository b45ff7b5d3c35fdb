import type { NatsConnection, Subscription } from 'nats';
import { splitFrame, type RawFrame } from '../bus/frames.ts';
import { subjects } from '../bus/subjects.ts';
import { errors, type CatracaError } from '../errors.ts';

export interface FrameSink {
  /** A frame in sequence; its payload is only valid during the call. */
  onFrame(frame: RawFrame): void;
  onFailure(err: CatracaError): void;
  /** The `traceparent` NATS header of the stream's first frame: the worker's span. */
  onTrace?(traceparent: string): void;
}

interface Route {
  sink: FrameSink;
  nextSeq: number;
  lastFrameAt: number;
  /** no worker has the job yet (it waits in the dispatcher, whose own deadline bounds it): no idle timeout */
  waiting: boolean;
}

/**
 * One wildcard subscription per front door carries the frames of all its requests; frames are
 * routed by request id, checked for sequence gaps, and streams that go quiet past the idle
 * timeout fail with 504 (a single sweep, not a timer per request).
 */
export class StreamRouter {
  private routes = new Map<string, Route>();
  private sub?: Subscription;
  private sweeper?: NodeJS.Timeout;
  private readonly requestIdOf: (subject: string) => string;

  constructor(
    private nc: NatsConnection,
    readonly doorId: string,
    private idleTimeoutMs: number,
  ) {
    this.requestIdOf = subjects.streamRequestId(doorId);
  }

  start(): void {
    this.sub = this.nc.subscribe(subjects.streamWildcard(this.doorId), {
      callback: (_err, msg) => this.dispatch(this.requestIdOf(msg.subject), msg.data, msg.headers?.get('traceparent')),
    });
    this.sweeper = setInterval(() => this.sweep(), Math.min(1000, this.idleTimeoutMs));
    this.sweeper.unref();
  }

  replySubject(requestId: string): string {
    return subjects.stream(this.doorId, requestId);
  }

  /** Registered before the job is sent (its frames may come before the worker's ack is read); the idle clock starts at `started`. */
  register(requestId: string, sink: FrameSink): void {
    this.routes.set(requestId, { sink, nextSeq: 0, lastFrameAt: Date.now(), waiting: true });
  }

  /** A worker took the job: from now on the stream fails when it stays quiet past the idle timeout. */
  started(requestId: string): void {
    const route = this.routes.get(requestId);
    if (route && route.waiting) {
      route.waiting = false;
      route.lastFrameAt = Date.now();
    }
  }

  /** A frame from this process's own worker lane (`subject` is a `replySubject` of this door). */
  deliverLocal(subject: string, data: Uint8Array, traceparent?: string): void {
    this.dispatch(this.requestIdOf(subject), data, traceparent);
  }

  unregister(requestId: string): void {
    this.routes.delete(requestId);
  }

  get size(): number {
    return this.routes.size;
  }

  private dispatch(requestId: string, data: Uint8Array, traceparent?: string): void {
    const route = this.routes.get(requestId);
    if (!route) return; // client gone; the worker still settles usage
    const frame = splitFrame(data);
    if (!frame) {
      this.fail(requestId, route, errors.upstream(502, 'invalid_frame', 'The worker sent a malformed frame.'));
      return;
    }
    if (frame.seq !== route.nextSeq) {
      this.fail(
        requestId,
        route,
        errors.upstream(502, 'stream_gap', `Frames were lost between worker and gateway (expected ${route.nextSeq}, got ${frame.seq}).`),
      );
      return;
    }
    if (frame.seq === 0 && traceparent) route.sink.onTrace?.(traceparent);
    route.nextSeq++;
    route.waiting = false;
    route.lastFrameAt = Date.now();
    route.sink.onFrame(frame);
  }

  /** The request's sink reports a frame it could not read (a terminal or extended frame failing its schema). */
  failRoute(requestId: string, err: CatracaError): void {
    const route = this.routes.get(requestId);
    if (route) this.fail(requestId, route, err);
  }

  private fail(requestId: string, route: Route, err: CatracaError): void {
    this.routes.delete(requestId);
    route.sink.onFailure(err);
  }

  private sweep(): void {
    const deadline = Date.now() - this.idleTimeoutMs;
    for (const [id, route] of this.routes) {
      if (!route.waiting && route.lastFrameAt < deadline) this.fail(id, route, errors.timeout('No data from the upstream within the idle timeout.'));
    }
  }

  stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sub?.unsubscribe();
  }
}
