import type { NatsConnection } from 'nats';
import { encode, type UsageMessage } from '../src/bus/messages.ts';
import { publishToStream, type RequestMux } from '../src/bus/requests.ts';
import { subjects } from '../src/bus/subjects.ts';
import type { Logger } from '../src/log.ts';
import { sleep } from './adapters/shared/abort.ts';

const USAGE_PUBLISH_TIMEOUT_MS = 5_000;
const USAGE_RETRY_MAX_MS = 5_000;

/**
 * Usage to JetStream at least once, exactly once in effect (msgID = request id, deduplicated by
 * the stream): a refused or unanswered publish is retried with backoff until it lands.
 */
export class UsagePublisher {
  private readonly pending = new Set<Promise<void>>();
  retries = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly requests: RequestMux,
    private readonly log: Logger,
  ) {}

  /** usage messages not yet acknowledged by JetStream */
  get size(): number {
    return this.pending.size;
  }

  publish(pool: string, msg: UsageMessage, traceparent: string): void {
    const data = encode(msg);
    const hdrs = { traceparent };
    const p = (async () => {
      let delay = 100;
      for (let attempt = 1; ; attempt++) {
        try {
          await publishToStream(this.requests, subjects.usage(pool), data, msg.request_id, USAGE_PUBLISH_TIMEOUT_MS, hdrs);
          return;
        } catch (err) {
          if (this.nc.isClosed()) {
            // Only reachable if someone closed the connection under us: leave the record in the log.
            this.log.error('usage publish impossible: NATS connection closed', { usage: msg, err: err as Error });
            return;
          }
          this.retries++;
          this.log.warn('usage publish failed; retrying', { request_id: msg.request_id, attempt, err: err as Error });
          await sleep(delay);
          delay = Math.min(delay * 2, USAGE_RETRY_MAX_MS);
        }
      }
    })();
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** Resolves once every usage message published so far has landed. */
  async flushed(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}
