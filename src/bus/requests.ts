import { createInbox, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from 'nats';

// Request/reply on the hot path (a job per request at the front door, a JetStream publish per
// request at the worker) without what nats.js's `request` costs each time: it builds an Error
// (a stack trace) on every call even when the reply comes, and a timer per request. Here one
// subscription on a private inbox takes every reply, a token in the reply subject finds the
// caller, and one sweep per 100 ms expires what waited too long. Failures are two shared error
// values: nothing is allocated per request beyond its promise.
//
// A caller that must know what became of a request it gave up on (a job a worker may still take)
// passes `onLate`: the reply that comes after the timeout, or null when none came within
// `LATE_REPLY_MS`. A request is timed out only after the replies already read from the socket have
// been seen (an event loop that lagged past a deadline does not turn an ack waiting in the socket
// into a timeout).

export class BusRequestError extends Error {
  constructor(readonly code: 'timeout' | 'no_responders' | 'closed') {
    super(code === 'timeout' ? 'no reply in time' : code === 'no_responders' ? 'no responders' : 'connection closed');
    this.name = 'BusRequestError';
  }
}
export const TIMEOUT = new BusRequestError('timeout');
export const NO_RESPONDERS = new BusRequestError('no_responders');
const CLOSED = new BusRequestError('closed');

interface Pending {
  resolve: (m: Msg) => void;
  reject: (e: BusRequestError) => void;
  deadline: number;
  onLate?: (m: Msg | null) => void;
}

/** How long a request that timed out with `onLate` waits for its late reply. */
export const LATE_REPLY_MS = 10 * 60 * 1000;

export class RequestMux {
  private readonly prefix: string;
  private pending = new Map<string, Pending>();
  /** requests that timed out and still want their late reply, with when to stop waiting */
  private late = new Map<string, { onLate: (m: Msg | null) => void; until: number }>();
  private seq = 0;
  private sub: Subscription;
  private timer: NodeJS.Timeout;

  constructor(
    private nc: NatsConnection,
    sweepMs = 100,
  ) {
    // under NATS permissions a process may read only its own inboxes (_INBOX.<user>.>)
    this.prefix = `${createInbox((nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix)}.`;
    this.sub = nc.subscribe(`${this.prefix}*`, {
      callback: (_err, msg) => {
        const token = msg.subject.slice(this.prefix.length);
        const p = this.pending.get(token);
        if (!p) return this.lateReply(token, msg);
        this.pending.delete(token);
        // the server answers a request nobody listens to with an empty 503 status message
        if (msg.data.length === 0 && msg.headers?.code === 503) p.reject(NO_RESPONDERS);
        else p.resolve(msg);
      },
    });
    this.timer = setInterval(() => {
      const now = Date.now();
      const expired: Array<[string, Pending]> = [];
      for (const [token, p] of this.pending) if (p.deadline <= now) expired.push([token, p]);
      for (const [token, l] of this.late) {
        if (l.until <= now) {
          this.late.delete(token);
          l.onLate(null);
        }
      }
      if (expired.length === 0) return;
      // after this turn's I/O: a reply already in the socket still counts
      setImmediate(() => {
        for (const [token, p] of expired) {
          if (this.pending.get(token) !== p) continue;
          this.pending.delete(token);
          if (p.onLate) this.late.set(token, { onLate: p.onLate, until: Date.now() + LATE_REPLY_MS });
          p.reject(TIMEOUT);
        }
      });
    }, sweepMs);
    this.timer.unref();
  }

  /**
   * Sends `data` to `subject` and resolves with the first reply; rejects with TIMEOUT or
   * NO_RESPONDERS. After a TIMEOUT, `onLate` gets the reply that still comes, or null.
   */
  request(subject: string, data: Uint8Array, timeoutMs: number, hdrs?: Record<string, string>, onLate?: (m: Msg | null) => void): Promise<Msg> {
    const token = (this.seq++).toString(36);
    return new Promise((resolve, reject) => {
      this.pending.set(token, { resolve, reject, deadline: Date.now() + timeoutMs, onLate });
      let h: ReturnType<typeof natsHeaders> | undefined;
      if (hdrs) {
        h = natsHeaders();
        for (const k in hdrs) h.set(k, hdrs[k]);
      }
      try {
        this.nc.publish(subject, data, { reply: this.prefix + token, headers: h });
      } catch {
        this.pending.delete(token);
        reject(CLOSED);
      }
    });
  }

  private lateReply(token: string, msg: Msg): void {
    const l = this.late.get(token);
    if (!l) return;
    this.late.delete(token);
    // the server's "no responders" for a request nobody took: nobody has it
    l.onLate(msg.data.length === 0 && msg.headers?.code === 503 ? null : msg);
  }

  get waiting(): number {
    return this.pending.size;
  }

  close(): void {
    clearInterval(this.timer);
    this.sub.unsubscribe();
    for (const p of this.pending.values()) p.reject(CLOSED);
    this.pending.clear();
    for (const l of this.late.values()) l.onLate(null);
    this.late.clear();
  }
}

/** A JetStream publish acknowledgement that reports a failure (the stream refused the message). */
export class PublishRefused extends Error {
  constructor(
    readonly code: number,
    description: string,
  ) {
    super(`JetStream refused the publish: ${description} (${code})`);
    this.name = 'PublishRefused';
  }
}

const ackDecoder = new TextDecoder();

/**
 * Publishes to a JetStream stream and waits for its acknowledgement, through the mux: the same
 * wire protocol as nats.js's `js.publish` (a request whose reply is the PubAck JSON), with
 * `Nats-Msg-Id` for the stream's duplicate window. Resolves once the stream stored it (or had it).
 */
export async function publishToStream(
  mux: RequestMux,
  subject: string,
  data: Uint8Array,
  msgId: string,
  timeoutMs: number,
  hdrs: Record<string, string> = {},
): Promise<{ seq: number; duplicate: boolean }> {
  const reply = await mux.request(subject, data, timeoutMs, { ...hdrs, 'Nats-Msg-Id': msgId });
  const ack = JSON.parse(ackDecoder.decode(reply.data)) as { seq?: number; duplicate?: boolean; error?: { code?: number; description?: string } };
  if (ack.error) throw new PublishRefused(ack.error.code ?? 0, ack.error.description ?? 'unknown error');
  return { seq: ack.seq ?? 0, duplicate: ack.duplicate === true };
}
