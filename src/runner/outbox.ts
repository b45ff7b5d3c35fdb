import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from 'nats';

/**
 * Frames published in one event-loop turn go out together at the end of it. nats.js flushes once
 * per microtask, and every token event arrives in its own I/O callback, so publishing directly costs
 * a write syscall per token; queueing until `setImmediate` (the end of the current poll phase) lets
 * every frame produced in that phase, across all streams, share one write. Order is kept. The same
 * queue serves a front door's in-process pools, whose frames go to its stream router instead: never
 * inside the adapter's own callback.
 */
export interface Outbox {
  /** `headers`: NATS headers of this message (the first frame's `traceparent`). */
  publish(subject: string, data: string, headers?: Record<string, string>): void;
  /** Sends what is queued now. */
  flush(): void;
}

/** An outbox that hands each queued frame to `send`, in order, once per event-loop turn. */
export function createTurnOutbox(send: (subject: string, data: string, headers?: Record<string, string>) => void): Outbox {
  let pending: Array<[string, string, Record<string, string> | undefined]> = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    const batch = pending;
    pending = [];
    for (const [subject, data, headers] of batch) send(subject, data, headers);
  };
  return {
    publish(subject, data, headers) {
      pending.push([subject, data, headers]);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    flush,
  };
}

/** Frames to NATS; a failed publish (the front door gone, the connection closing) is reported, not thrown. */
export function createOutbox(nc: NatsConnection, onError: (err: unknown, subject: string) => void): Outbox {
  return createTurnOutbox((subject, data, headers) => {
    let h: MsgHdrs | undefined;
    if (headers) {
      h = natsHeaders();
      for (const k in headers) h.set(k, headers[k]!);
    }
    try {
      nc.publish(subject, data, h && { headers: h });
    } catch (err) {
      onError(err, subject);
    }
  });
}
