import { AckPolicy, connect, DeliverPolicy, type JsMsg, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUsageStream } from '../../src/bus/usage-stream.ts';
import { decodeJson, type UsageMessage } from '../../src/bus/messages.ts';
import { RequestMux } from '../../src/bus/requests.ts';
import { subjects, USAGE_STREAM } from '../../src/bus/subjects.ts';
import { createLogger } from '../../src/log.ts';
import { natsUrl, uniquePool, waitFor } from '../helpers/worker.ts';
import { UsagePublisher } from '../../src/runner/usage-publisher.ts';

let nc: NatsConnection;
beforeAll(async () => {
  nc = await connect({ servers: natsUrl() });
  await ensureUsageStream(nc);
});
afterAll(async () => {
  await nc?.drain();
});

const usage = (pool: string, n: number): UsageMessage => ({
  v: 1,
  request_id: `gen-pub-${pool}-${n}`,
  tenant_id: 'ten_x',
  key_id: 'key_x',
  model: 'sim/echo',
  pool,
  input_price: '1000000',
  output_price: '2000000',
  prompt_tokens: 10 + n,
  completion_tokens: n,
  estimated: false,
  outcome: 'completed',
  ended_at: 1_700_000_000_000 + n,
  worker: 'wrk_test',
});
const tp = (n: number) => `00-${String(n).padStart(32, '0')}-${String(n).padStart(16, '0')}-01`;

/** Every message stored on the pool's usage subject (read by an ephemeral consumer, left in the stream). */
async function stored(pool: string, expected: number): Promise<JsMsg[]> {
  const jsm = await nc.jetstreamManager();
  const ci = await jsm.consumers.add(USAGE_STREAM, {
    filter_subject: subjects.usage(pool),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    inactive_threshold: 30 * 1e9,
  });
  const consumer = await nc.jetstream().consumers.get(USAGE_STREAM, ci.name);
  const out: JsMsg[] = [];
  for await (const m of await consumer.fetch({ max_messages: expected + 1, expires: 1000 })) out.push(m);
  await consumer.delete().catch(() => {});
  await jsm.streams.purge(USAGE_STREAM, { filter: subjects.usage(pool) }); // nobody settles these
  return out;
}

describe('usage publisher (real JetStream)', () => {
  it('usage ending within the linger window goes out as one batch message; a request ending alone as a lone message with msgID = request id', async () => {
    const pool = uniquePool();
    const pub = new UsagePublisher(nc, new RequestMux(nc), createLogger('test'), 100);
    for (const n of [1, 2, 3]) pub.publish(pool, usage(pool, n), tp(n));
    expect(pub.size).toBe(3);
    await waitFor(() => pub.size === 0, 5000);
    pub.publish(pool, usage(pool, 4), tp(4));
    await pub.flushed();
    expect(pub.size).toBe(0);

    const msgs = await stored(pool, 2);
    expect(msgs).toHaveLength(2);
    const batch = decodeJson(msgs[0].data) as { v: number; batch: string; items: Array<UsageMessage & { traceparent: string }> };
    expect(batch.v).toBe(2);
    expect(msgs[0].headers?.get('Nats-Msg-Id')).toBe(batch.batch);
    expect(batch.items).toEqual([1, 2, 3].map((n) => ({ ...usage(pool, n), traceparent: tp(n) })));
    expect(decodeJson(msgs[1].data)).toEqual(usage(pool, 4));
    expect(msgs[1].headers?.get('Nats-Msg-Id')).toBe(usage(pool, 4).request_id);
    expect(msgs[1].headers?.get('traceparent')).toBe(tp(4));
  });

  it('batch ids never repeat across publishers (a restarted worker keeps its id, JetStream would drop a repeated msgID)', async () => {
    const pool = uniquePool();
    const a = new UsagePublisher(nc, new RequestMux(nc), createLogger('test'), 50);
    const b = new UsagePublisher(nc, new RequestMux(nc), createLogger('test'), 50);
    for (const n of [1, 2]) a.publish(pool, usage(pool, n), tp(n));
    for (const n of [3, 4]) b.publish(pool, usage(pool, n), tp(n));
    await Promise.all([a.flushed(), b.flushed()]);
    const msgs = await stored(pool, 2);
    expect(msgs).toHaveLength(2);
    const items = msgs.flatMap((m) => (decodeJson(m.data) as { items: UsageMessage[] }).items.map((i) => i.request_id)).sort();
    expect(items).toEqual([1, 2, 3, 4].map((n) => usage(pool, n).request_id));
  });
});
