// Helpers for the worker tests (imported only by *.test.ts).
import { createId } from '@paralleldrive/cuid2';
import { AckPolicy, DeliverPolicy, type NatsConnection } from 'nats';
import { decodeJson, encode, type Job, type JobAck, type UsageBatch, type UsageMessage } from '../../src/bus/messages.ts';
import { decodeFrame, type Frame } from '../../src/bus/frames.ts';
import { subjects, USAGE_STREAM } from '../../src/bus/subjects.ts';
import { catalogEntry, type CatalogEntry, type ModelSource } from '../../src/catalog/catalog.ts';
import { defaultProtocol, type ModelRecord } from '../../src/db/models.ts';
import { newCall, type UpstreamCall } from '../../src/providers/types.ts';

export const natsUrl = () => process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
export const uniquePool = () => `t${createId().slice(0, 12)}`;

// The catalog the test workers resolve models from: every model a test job names is put here.
const testModels = new Map<string, CatalogEntry>();
export const testCatalog: ModelSource = { get: async (id) => testModels.get(id), fetch: async (id) => testModels.get(id) };

/** A catalog entry (registered in testCatalog); sim/echo of `pool` unless overridden. */
export function testModel(pool: string, over: Partial<ModelRecord> = {}): CatalogEntry {
  const record: ModelRecord = {
    id: 'sim/echo',
    pool,
    protocol: defaultProtocol(pool === 'anthropic' ? 'anthropic' : over.base_url ? 'openai' : 'sim'),
    upstream_model: 'echo',
    base_url: null,
    api_key_env: null,
    input_price: 1_500_000n,
    output_price: 6_000_000n,
    cached_input_price: null,
    cache_write_price: null,
    cache_write_1h_price: null,
    batch_input_price: null,
    batch_output_price: null,
    batch_cached_input_price: null,
    batch_cache_write_price: null,
    batch_cache_write_1h_price: null,
    batch_mode: 'queue',
    context_length: 128000,
    max_output_tokens: 4096,
    input_modalities: ['text'],
    image_input_tokens: null,
    extra_params: [],
    kind: 'chat',
    legacy_completions: false,
    weight: 1,
    reasoning: false,
    context_length_set: true,
    name: null,
    description: null,
    created_at: new Date(0),
    updated_at: new Date(0),
    ...over,
  };
  const entry = catalogEntry({ ...record });
  testModels.set(entry.id, entry);
  return entry;
}

export function makeJob(pool: string, over: Partial<Omit<Job, 'model'>> & { upstream?: Partial<ModelRecord> } = {}): Job {
  const { upstream, ...rest } = over;
  const request_id = over.request_id ?? `req_${createId()}`;
  const m = testModel(pool, upstream);
  return {
    v: 1,
    request_id,
    tenant_id: 'ten_test',
    key_id: 'key_test',
    model: { id: m.id, fingerprint: m.fingerprint, input_price: m.input_price.toString(), output_price: m.output_price.toString() },
    body: { messages: [{ role: 'user', content: 'hi' }] },
    max_tokens: 256,
    reply_to: subjects.stream('door_test', request_id),
    deadline: Date.now() + 60_000,
    ...rest,
  };
}

/** A job with its catalog entry, as an adapter receives it. */
export function makeCall(pool: string, over: Parameters<typeof makeJob>[1] = {}): UpstreamCall {
  const job = makeJob(pool, over);
  return newCall(job, testModels.get(job.model.id)!);
}

export interface Run {
  ack: JobAck;
  /** resolves with every frame up to and including the terminal one */
  frames: Promise<Frame[]>;
  /** frames received so far */
  seen: Frame[];
}

/** Sends a job like the front door does (request → ack) and collects its frames. */
export async function sendJob(nc: NatsConnection, pool: string, job: Job, timeoutMs = 10_000): Promise<Run> {
  const seen: Frame[] = [];
  const sub = nc.subscribe(job.reply_to);
  const frames = (async () => {
    const timer = setTimeout(() => sub.unsubscribe(), timeoutMs);
    for await (const m of sub) {
      const f = decodeFrame(m.data);
      if (!f) throw new Error(`not a frame: ${new TextDecoder().decode(m.data)}`);
      seen.push(f);
      if (f.t === 'done' || f.t === 'error') break;
    }
    clearTimeout(timer);
    sub.unsubscribe();
    return seen;
  })();
  await nc.flush();
  const reply = await nc.request(subjects.job(pool), encode(job), { timeout: 5000 });
  const ack = decodeJson(reply.data) as JobAck;
  if (!ack.ok) sub.unsubscribe();
  return { ack, frames, seen };
}

/** The usage message JetStream holds for a request, and how many copies of it the stream has. */
export async function usageOf(nc: NatsConnection, pool: string, requestId: string, waitMs = 5000): Promise<{ msg: UsageMessage; count: number }> {
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const subj = subjects.usage(pool);
  const until = Date.now() + waitMs;
  for (;;) {
    const info = await jsm.streams.info(USAGE_STREAM, { subjects_filter: subj });
    const total = info.state.subjects?.[subj] ?? 0;
    if (total > 0) {
      // A plain ephemeral pull consumer: filter_subject works on nats-server 2.9 (Debian's). USAGE
      // is a work queue: its consumers ack explicitly, and what this one reads and never acks
      // stays in the stream for the next reader once it is deleted.
      const ci = await jsm.consumers.add(USAGE_STREAM, {
        filter_subject: subj,
        ack_policy: AckPolicy.Explicit,
        ack_wait: 60 * 1e9,
        deliver_policy: DeliverPolicy.All,
        inactive_threshold: 30 * 1e9,
      });
      const consumer = await js.consumers.get(USAGE_STREAM, ci.name);
      const found: UsageMessage[] = [];
      const batch = await consumer.fetch({ max_messages: total, expires: 2000 });
      let n = 0;
      for await (const m of batch) {
        // a lone usage message, or a worker's batch of them
        const u = m.json<UsageMessage | UsageBatch>();
        for (const item of u.v === 2 ? u.items : [u]) if (item.request_id === requestId) found.push(item);
        if (++n >= total) break;
      }
      await consumer.delete().catch(() => {});
      if (found.length > 0) return { msg: found[0], count: found.length };
    }
    if (Date.now() > until) throw new Error(`no usage for ${requestId} on ${subj}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const deltas = (frames: Frame[]) => frames.filter((f) => f.t === 'delta').map((f) => (f as { content: string }).content);
export const waitFor = async (cond: () => boolean, ms = 5000) => {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error('timeout waiting for condition');
    await new Promise((r) => setTimeout(r, 5));
  }
};
