import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encode } from '../../src/bus/messages.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { loadConfig } from '../../src/config.ts';
import { createSimAdapter } from '../../src/providers/sim/index.ts';
import { deltas, makeJob, testCatalog, natsUrl, sendJob, uniquePool, usageOf, waitFor } from '../helpers/worker.ts';
import { startWorker, type WorkerHandle } from '../../workers/worker.ts';

const config = loadConfig({ NATS_URL: natsUrl() });
const sim = createSimAdapter({ firstTokenMs: 0, tokensPerSecond: 0 });
const simRegistry = { forProtocol: () => sim, all: () => [sim] };

let nc: NatsConnection;
beforeAll(async () => {
  nc = await connect({ servers: natsUrl() });
});
afterAll(async () => {
  await nc?.drain();
});

async function worker(pool: string, over: Partial<Parameters<typeof startWorker>[0]> = {}): Promise<WorkerHandle> {
  return startWorker({ pools: [pool], natsUrl: natsUrl(), config, registry: simRegistry, catalog: testCatalog, keepaliveMs: 60_000, ...over });
}

describe('worker (sim adapter, real NATS)', () => {
  it('acks, streams one token per delta frame, ends with done + exact usage, publishes usage once', async () => {
    const pool = uniquePool();
    const w = await worker(pool);
    try {
      const job = makeJob(pool, {
        body: {
          messages: [
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'Olá, mundo! Tudo bem?' },
          ],
          temperature: 0,
        },
      });
      const run = await sendJob(nc, pool, job);
      expect(run.ack).toEqual({ ok: true, worker: w.id });
      expect(await run.frames).toEqual([
        { t: 'delta', content: 'Olá,', seq: 0 },
        { t: 'delta', content: ' mundo!', seq: 1 },
        { t: 'delta', content: ' Tudo', seq: 2 },
        { t: 'delta', content: ' bem?', seq: 3 },
        { t: 'done', finish_reason: 'stop', usage: { prompt_tokens: 15, completion_tokens: 4 }, estimated: false, seq: 4 },
      ]);
      const { msg, count } = await usageOf(nc, pool, job.request_id);
      expect(count).toBe(1);
      expect(msg).toEqual({
        v: 1,
        request_id: job.request_id,
        tenant_id: 'ten_test',
        key_id: 'key_test',
        model: 'sim/echo',
        pool,
        input_price: '1500000',
        output_price: '6000000',
        prompt_tokens: 15,
        completion_tokens: 4,
        estimated: false,
        outcome: 'completed',
        ended_at: msg.ended_at,
        worker: w.id,
      });
      expect(msg.ended_at).toBeGreaterThan(Date.now() - 10_000);

      // A retried publish (same msgID) is dropped by JetStream's duplicate window.
      const js = nc.jetstream();
      const ack = await js.publish(subjects.usage(pool), encode(msg), { msgID: job.request_id });
      expect(ack.duplicate).toBe(true);
      expect((await usageOf(nc, pool, job.request_id)).count).toBe(1);

      await waitFor(() => w.stats().usagePending === 0);
      const s = w.stats();
      expect([s.accepted, s.completed, s.failed, s.cancelled, s.busy, s.inFlight]).toEqual([1, 1, 0, 0, 0, 0]);
      expect(s.firstTokenMs.count).toBe(1);
    } finally {
      await w.stop();
    }
  });

  it('lorem is cut at max_tokens with finish_reason length', async () => {
    const pool = uniquePool();
    const w = await worker(pool);
    try {
      const job = makeJob(pool, {
        upstream: { id: 'sim/lorem', upstream_model: 'lorem' },
        body: { messages: [{ role: 'user', content: 'go' }] },
        max_tokens: 5,
      });
      const frames = await (await sendJob(nc, pool, job)).frames;
      expect(deltas(frames)).toEqual(['Lorem', ' ipsum', ' dolor', ' sit', ' amet,']);
      expect(frames.at(-1)).toEqual({ t: 'done', finish_reason: 'length', usage: { prompt_tokens: 7, completion_tokens: 5 }, estimated: false, seq: 5 });
      expect((await usageOf(nc, pool, job.request_id)).msg.completion_tokens).toBe(5);
    } finally {
      await w.stop();
    }
  });

  it('sends keepalive frames while waiting for the first token, seqs contiguous', async () => {
    const pool = uniquePool();
    const w = await worker(pool, { keepaliveMs: 50 });
    try {
      const job = makeJob(pool, { body: { messages: [{ role: 'user', content: 'a b' }], sim: { first_token_ms: 300 } } });
      const frames = await (await sendJob(nc, pool, job)).frames;
      expect(frames.map((f) => f.seq)).toEqual(frames.map((_, i) => i));
      const firstDelta = frames.findIndex((f) => f.t === 'delta');
      expect(firstDelta).toBeGreaterThanOrEqual(2);
      expect(frames.slice(0, firstDelta).every((f) => f.t === 'keepalive')).toBe(true);
      expect(frames.slice(firstDelta).map((f) => f.t)).toEqual(['delta', 'delta', 'done']);
    } finally {
      await w.stop();
    }
  });

  it('refuses with busy beyond its concurrency and invalid_job for a malformed job', async () => {
    const pool = uniquePool();
    const w = await worker(pool, { concurrency: 2 });
    try {
      const slow = () => makeJob(pool, { body: { messages: [{ role: 'user', content: 'x' }], sim: { first_token_ms: 10_000 } } });
      const ja = slow();
      const jb = slow();
      const a = await sendJob(nc, pool, ja);
      const b = await sendJob(nc, pool, jb);
      const refused = await sendJob(nc, pool, makeJob(pool));
      expect([a.ack.ok, b.ack.ok]).toEqual([true, true]);
      expect(refused.ack).toEqual({ ok: false, code: 'busy', message: `Worker ${w.id} is at its concurrency limit (2).` });
      const bad = await nc.request(subjects.job(pool), encode({ v: 1, request_id: 'x' }), { timeout: 2000 });
      expect(bad.json()).toEqual({ ok: false, code: 'invalid_job', message: 'The job does not match the Job schema.' });
      expect(w.stats()).toMatchObject({ inFlight: 2, accepted: 2, busy: 1, invalid: 1 });

      // Cancelled before the first token: nothing generated, but the vendor had the prompt (a
      // vendor bills a prompt it started reading), so the prompt is billed: 3 + (3 + 1) = 7.
      nc.publish(subjects.cancel(w.id, ja.request_id));
      expect(await a.frames).toEqual([
        {
          t: 'error',
          status: 499,
          code: 'request_cancelled',
          message: 'The request was cancelled by the client.',
          usage: { prompt_tokens: 7, completion_tokens: 0 },
          seq: 0,
        },
      ]);
      const ua = await usageOf(nc, pool, ja.request_id);
      expect([ua.msg.outcome, ua.msg.prompt_tokens, ua.msg.completion_tokens]).toEqual(['cancelled', 7, 0]);
      // A freed slot takes work again.
      expect((await sendJob(nc, pool, makeJob(pool))).ack.ok).toBe(true);
      nc.publish(subjects.cancel(w.id, jb.request_id));
      await b.frames;
    } finally {
      await w.stop();
    }
  });

  it('cancel mid-stream stops generation and bills the tokens generated so far', async () => {
    const pool = uniquePool();
    const w = await worker(pool);
    try {
      const job = makeJob(pool, {
        upstream: { id: 'sim/lorem', upstream_model: 'lorem' },
        body: { messages: [{ role: 'user', content: 'write a lot' }], sim: { tokens_per_second: 50, output_tokens: 1000 } },
        max_tokens: 1000,
      });
      const run = await sendJob(nc, pool, job);
      await waitFor(() => run.seen.length >= 5);
      nc.publish(subjects.cancel(w.id, job.request_id));
      const frames = await run.frames;
      const generated = deltas(frames).length;
      expect(generated).toBeGreaterThanOrEqual(5);
      expect(generated).toBeLessThan(20);
      expect(frames.at(-1)).toEqual({
        t: 'error',
        status: 499,
        code: 'request_cancelled',
        message: 'The request was cancelled by the client.',
        usage: { prompt_tokens: 9, completion_tokens: generated },
        seq: generated,
      });
      const { msg, count } = await usageOf(nc, pool, job.request_id);
      expect(count).toBe(1);
      expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens, msg.estimated]).toEqual(['cancelled', 9, generated, false]);
      // Generation really stopped: no frame after the terminal one.
      await new Promise((r) => setTimeout(r, 100));
      expect(run.seen.length).toBe(frames.length);
      expect(w.stats()).toMatchObject({ cancelled: 1, inFlight: 0 });
    } finally {
      await w.stop();
    }
  });

  it('an upstream failure mid-stream ends with an error frame carrying the partial usage', async () => {
    const pool = uniquePool();
    const w = await worker(pool);
    try {
      const job = makeJob(pool, { body: { messages: [{ role: 'user', content: 'one two three four' }], sim: { fail_after_tokens: 2 } } });
      const frames = await (await sendJob(nc, pool, job)).frames;
      expect(frames).toEqual([
        { t: 'delta', content: 'one', seq: 0 },
        { t: 'delta', content: ' two', seq: 1 },
        {
          t: 'error',
          status: 502,
          code: 'upstream_stream_interrupted',
          message: 'The sim vendor failed after 2 tokens (fail_after_tokens).',
          usage: { prompt_tokens: 10, completion_tokens: 2 },
          seq: 2,
        },
      ]);
      const { msg } = await usageOf(nc, pool, job.request_id);
      expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens]).toEqual(['error', 10, 2]);
      expect(w.stats().failed).toBe(1);
    } finally {
      await w.stop();
    }
  });

  it('abandons a job at its deadline with 504', async () => {
    const pool = uniquePool();
    const w = await worker(pool);
    try {
      const job = makeJob(pool, {
        body: { messages: [{ role: 'user', content: 'a b c d e f g h i j' }], sim: { tokens_per_second: 10 } },
        deadline: Date.now() + 250,
      });
      const frames = await (await sendJob(nc, pool, job)).frames;
      const n = deltas(frames).length;
      expect(n).toBeGreaterThanOrEqual(1);
      expect(n).toBeLessThan(10);
      expect(frames.at(-1)).toMatchObject({ t: 'error', status: 504, code: 'upstream_timeout', usage: { prompt_tokens: 16, completion_tokens: n } });
      expect((await usageOf(nc, pool, job.request_id)).msg.outcome).toBe('error');
    } finally {
      await w.stop();
    }
  });

  it('stop() drains: refuses new work, lets short streams finish, cuts long ones and bills them', async () => {
    const pool = uniquePool();
    const w = await worker(pool, { drainTimeoutMs: 400 });
    const short = makeJob(pool, { body: { messages: [{ role: 'user', content: 'a b c' }], sim: { first_token_ms: 100 } } });
    const long = makeJob(pool, { body: { messages: [{ role: 'user', content: 'a b c d e f g h i j k l' }], sim: { tokens_per_second: 10 } } });
    const rs = await sendJob(nc, pool, short);
    const rl = await sendJob(nc, pool, long);
    const stopped = w.stop();
    await new Promise((r) => setTimeout(r, 20));
    await expect(nc.request(subjects.job(pool), encode(makeJob(pool)), { timeout: 1000 })).rejects.toThrow(/503|no responders/i);
    expect((await rs.frames).at(-1)).toMatchObject({ t: 'done', usage: { prompt_tokens: 9, completion_tokens: 3 } });
    const lf = await rl.frames;
    const n = deltas(lf).length;
    expect(n).toBeGreaterThanOrEqual(3);
    expect(n).toBeLessThan(12);
    expect(lf.at(-1)).toMatchObject({ t: 'error', status: 503, code: 'worker_shutting_down', usage: { prompt_tokens: 18, completion_tokens: n } });
    await stopped;
    // stop() resolved only after both usage messages were acknowledged by JetStream.
    expect(w.stats().usagePending).toBe(0);
    expect((await usageOf(nc, pool, short.request_id, 0)).msg.outcome).toBe('completed');
    const ul = await usageOf(nc, pool, long.request_id, 0);
    expect([ul.msg.outcome, ul.msg.completion_tokens]).toEqual(['error', n]);
  });
});
