import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from 'nats';

/**
 * Frames published in one event-loop turn go out in one socket write. nats.js flushes once per
 * microtask, and every token event arrives in its own I/O callback, so publishing directly costs a
 * write syscall per token; queueing until `setImmediate` (the end of the current poll phase)
 * lets every frame produced in that phase, across all streams, share one write. Order is kept.
 */
export interface Outbox {
  /** `headers`: NATS headers of this message (the first frame's `traceparent`). */
  publish(subject: string, data: string, headers?: Record<string, string>): void;
  /** Sends what is queued now. */
  flush(): void;
}

export function createOutbox(nc: NatsConnection, onError: (err: unknown, subject: string) => void): Outbox {
  let pending: Array<[string, string, MsgHdrs | undefined]> = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    const batch = pending;
    pending = [];
    for (const [subject, data, headers] of batch) {
      try {
        nc.publish(subject, data, headers && { headers });
      } catch (err) {
        onError(err, subject);
      }
    }
  };
  return {
    publish(subject: string, data: string, headers?: Record<string, string>): void {
      let h: MsgHdrs | undefined;
      if (headers) {
        h = natsHeaders();
        for (const k in headers) h.set(k, headers[k]!);
      }
      pending.push([subject, data, h]);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    flush,
  };
}
