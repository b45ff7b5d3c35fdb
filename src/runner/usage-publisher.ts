import { randomBytes } from 'node:crypto';
import type { NatsConnection } from 'nats';
import { encode, type UsageBatch, type UsageMessage } from '../bus/messages.ts';
import { publishToStream, type RequestMux } from '../bus/requests.ts';
import { subjects } from '../bus/subjects.ts';
import type { Logger } from '../log.ts';
import { sleep } from '../providers/shared/abort.ts';

const USAGE_PUBLISH_TIMEOUT_MS = 5_000;
const USAGE_RETRY_MAX_MS = 5_000;
/** items in one batch message (~400 bytes each: far below NATS's max_payload) */
const MAX_BATCH = 256;

type Pending = { msg: UsageMessage; traceparent: string };

/**
 * Usage to JetStream at least once, exactly once in effect: a refused or unanswered publish is
 * retried with backoff until it lands, with the same msgID (deduplicated by the stream), and
 * metering settles each request id once whatever arrives twice.
 *
 * Usage that ends within `lingerMs` of the first is published as one message (a `UsageBatch`,
 * msgID unique to that publish): JetStream stores, delivers and removes one message for all of
 * them, and metering acks one. A request that ends alone goes out as a lone v1 message (msgID =
 * request id). `lingerMs` 0 publishes at the end of the event-loop turn.
 */
export class UsagePublisher {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly queued = new Map<string, Pending[]>();
  private timer: NodeJS.Timeout | undefined;
  private queuedCount = 0;
  private inFlightCount = 0;
  private batchSeq = 0;
  /** per process: a restarted worker with the same id never reuses a batch msgID within JetStream's duplicate window */
  private readonly batchPrefix = randomBytes(8).toString('hex');
  retries = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly requests: RequestMux,
    private readonly log: Logger,
    private readonly lingerMs = 0,
  ) {}

  /** usage messages not yet stored by JetStream (queued, or being published and retried) */
  get size(): number {
    return this.queuedCount + this.inFlightCount;
  }

  publish(pool: string, msg: UsageMessage, traceparent: string): void {
    let list = this.queued.get(pool);
    if (!list) this.queued.set(pool, (list = []));
    list.push({ msg, traceparent });
    this.queuedCount++;
    if (list.length >= MAX_BATCH) this.flushPool(pool);
    else if (!this.timer) {
      this.timer = this.lingerMs > 0 ? setTimeout(() => this.flushAll(), this.lingerMs) : (setImmediate(() => this.flushAll()) as unknown as NodeJS.Timeout);
    }
  }

  /** Resolves once every usage message published so far has landed. */
  async flushed(): Promise<void> {
    this.flushAll();
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  private flushAll(): void {
    if (this.timer) {
      if (this.lingerMs > 0) clearTimeout(this.timer);
      else clearImmediate(this.timer as unknown as NodeJS.Immediate);
      this.timer = undefined;
    }
    for (const pool of [...this.queued.keys()]) this.flushPool(pool);
  }

  private flushPool(pool: string): void {
    const items = this.queued.get(pool);
    if (!items || items.length === 0) return;
    this.queued.delete(pool);
    this.queuedCount -= items.length;
    if (items.length === 1) {
      const { msg, traceparent } = items[0];
      this.send(pool, encode(msg), msg.request_id, { traceparent }, items);
    } else {
      const batch: UsageBatch = { v: 2, batch: `${this.batchPrefix}-${++this.batchSeq}`, items: items.map((p) => ({ ...p.msg, traceparent: p.traceparent })) };
      this.send(pool, encode(batch), batch.batch, {}, items);
    }
  }

  private send(pool: string, data: Uint8Array, msgId: string, hdrs: Record<string, string>, items: Pending[]): void {
    this.inFlightCount += items.length;
    const p = (async () => {
      let delay = 100;
      for (let attempt = 1; ; attempt++) {
        try {
          await publishToStream(this.requests, subjects.usage(pool), data, msgId, USAGE_PUBLISH_TIMEOUT_MS, hdrs);
          return;
        } catch (err) {
          if (this.nc.isClosed()) {
            // Only reachable if someone closed the connection under us: leave the records in the log.
            this.log.error('usage publish impossible: NATS connection closed', { usage: items.map((i) => i.msg), err: err as Error });
            return;
          }
          this.retries++;
          this.log.warn('usage publish failed; retrying', { request_ids: items.map((i) => i.msg.request_id), attempt, err: err as Error });
          await sleep(delay);
          delay = Math.min(delay * 2, USAGE_RETRY_MAX_MS);
        }
      }
    })();
    this.inFlight.add(p);
    void p.finally(() => {
      this.inFlight.delete(p);
      this.inFlightCount -= items.length;
    });
  }
}
