import { createInbox, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from 'nats';

// Request/reply on the hot path (a job per request at the front door, a JetStream publish per
// request at the worker) without what nats.js's `request` costs each time: it builds an Error
// (a stack trace) on every call even when the reply comes, and a timer per request. Here one
// subscription on a private inbox takes every reply, a token in the reply subject finds the
// caller, and one sweep per 100 ms expires what waited too long. Failures are two shared error
// values: nothing is allocated per request beyond its promise.

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
}

export class RequestMux {
  private readonly prefix: string;
  private pending = new Map<string, Pending>();
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
        const p = this.pending.get(msg.subject.slice(this.prefix.length));
        if (!p) return;
        this.pending.delete(msg.subject.slice(this.prefix.length));
        // the server answers a request nobody listens to with an empty 503 status message
        if (msg.data.length === 0 && msg.headers?.code === 503) p.reject(NO_RESPONDERS);
        else p.resolve(msg);
      },
    });
    this.timer = setInterval(() => {
      const now = Date.now();
      for (const [token, p] of this.pending) {
        if (p.deadline <= now) {
          this.pending.delete(token);
          p.reject(TIMEOUT);
        }
      }
    }, sweepMs);
    this.timer.unref();
  }

  /** Sends `data` to `subject` and resolves with the first reply; rejects with TIMEOUT or NO_RESPONDERS. */
  request(subject: string, data: Uint8Array, timeoutMs: number, hdrs?: Record<string, string>): Promise<Msg> {
    const token = (this.seq++).toString(36);
    return new Promise((resolve, reject) => {
      this.pending.set(token, { resolve, reject, deadline: Date.now() + timeoutMs });
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

  get waiting(): number {
    return this.pending.size;
  }

  close(): void {
    clearInterval(this.timer);
    this.sub.unsubscribe();
    for (const p of this.pending.values()) p.reject(CLOSED);
    this.pending.clear();
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
