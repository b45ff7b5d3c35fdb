import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockUpstream, type MockUpstream } from '../../bench/mock-upstream/server.ts';
import { encode } from '../../src/bus/messages.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/pool.ts';
import { upsertModel } from '../../src/db/models.ts';
import { deltas, makeJob, natsUrl, sendJob, uniquePool, usageOf, waitFor } from '../helpers/worker.ts';

// workers/main.ts as a real process: SIGTERM lets the in-flight stream finish, refuses new work,
// publishes usage, exits 0.
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const KEY = 'sk-main-test-0123456789abcdef';

let mock: MockUpstream;
let nc: NatsConnection;
beforeAll(async () => {
  mock = await startMockUpstream();
  nc = await connect({ servers: natsUrl() });
});
afterAll(async () => {
  await nc?.drain();
  await mock?.close();
});

describe('workers/main.ts', () => {
  it('drains on SIGTERM and exits 0', async () => {
    const pool = uniquePool();
    // the worker process resolves the job's model in its own catalog (PostgreSQL), never from the job
    const upstream = {
      id: `mock/${pool}`,
      pool,
      protocol: 'openai' as const,
      upstream_model: 'mock-slow',
      base_url: mock.url,
      api_key_env: 'MAIN_TEST_KEY',
      extra_params: ['mock'],
      input_price: 1_500_000n,
      output_price: 6_000_000n,
    };
    await migrate(process.env.DATABASE_URL!);
    const db = createPool(process.env.DATABASE_URL!, 1);
    const row = await upsertModel(db, upstream);
    await db.end();
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'workers/main.ts')], {
      cwd: ROOT,
      env: {
        ...process.env,
        NATS_URL: natsUrl(),
        WORKER_POOLS: pool,
        CATRACA_INSTANCE: `wrk_${pool}`,
        MAIN_TEST_KEY: KEY,
        WORKER_UPSTREAM_KEYS: 'MAIN_TEST_KEY',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      await waitFor(() => stderr.includes('worker ready'), 15_000);
      expect(JSON.parse(stderr.split('\n').find((l) => l.includes('worker ready'))!)).toMatchObject({ worker: `wrk_${pool}`, pools: [pool] });

      const job = makeJob(pool, {
        upstream: row,
        body: { messages: [{ role: 'user', content: 'hi' }], mock: { first_token_ms: 50, tokens_per_second: 20, output_tokens: 10 } },
      });
      const run = await sendJob(nc, pool, job);
      expect(run.ack).toEqual({ ok: true, worker: `wrk_${pool}` });
      await waitFor(() => run.seen.some((f) => f.t === 'delta'));
      child.kill('SIGTERM');
      await waitFor(() => stderr.includes('worker draining'));
      // New work is refused: either the UNSUB already reached the server (no responders), or the
      // job lands in the drain window and is answered `draining` (the front door tries elsewhere).
      // (the same model as the first job: an unknown one would be refused as invalid_job before the drain is asked)
      const refusal = await nc.request(subjects.job(pool), encode(makeJob(pool, { upstream: row })), { timeout: 1000 }).then(
        (m) => JSON.parse(new TextDecoder().decode(m.data)),
        (err) => String(err.message ?? err),
      );
      if (typeof refusal === 'string') expect(refusal).toMatch(/503|no responders/i);
      else expect(refusal).toMatchObject({ ok: false, code: 'draining' });
      const frames = await run.frames;
      expect(deltas(frames).join('')).toBe('Hello world foo bar baz qux quux corge grault garply');
      expect(frames.at(-1)).toEqual({ t: 'done', finish_reason: 'stop', usage: { prompt_tokens: 7, completion_tokens: 10 }, estimated: false, seq: 10 });
      expect(await exited).toBe(0);
      const { msg, count } = await usageOf(nc, pool, job.request_id, 0);
      expect([count, msg.outcome, msg.completion_tokens, msg.worker]).toEqual([1, 'completed', 10, `wrk_${pool}`]);
      expect(stderr).not.toContain(KEY);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 30_000);
});
