import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { freePort } from '../../src/stack/services.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from 'nats';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createSimAdapter } from '../../src/providers/sim/index.ts';
import { makeJob, testCatalog, sendJob, uniquePool, usageOf, waitFor } from '../helpers/worker.ts';
import { startWorker } from '../../workers/worker.ts';

// NATS goes away while a job streams: the worker keeps going, retries its usage publish, and the
// usage lands exactly once when the server (same JetStream store) is back. Own nats-server.
const NATS_BIN = process.env.TEST_NATS_BIN ?? process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';
const dir = mkdtempSync(join(tmpdir(), 'catraca-outage-'));
let server: ChildProcess | undefined;

async function startNats(port: number): Promise<void> {
  server = spawn(NATS_BIN, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
  const until = Date.now() + 10_000;
  for (;;) {
    try {
      const nc = await connect({ servers: `nats://127.0.0.1:${port}`, reconnect: false });
      await nc.close();
      return;
    } catch {
      if (Date.now() > until) throw new Error('nats-server did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
async function stopNats(): Promise<void> {
  const s = server;
  if (!s || s.exitCode !== null) return;
  await new Promise((r) => {
    s.once('exit', r);
    s.kill('SIGKILL');
  });
}

afterAll(async () => {
  await stopNats();
  rmSync(dir, { recursive: true, force: true });
});

describe('usage survives a NATS outage', () => {
  it('retries the usage publish until the server is back; the message lands once', async () => {
    const port = await freePort();
    const url = `nats://127.0.0.1:${port}`;
    await startNats(port);
    const pool = uniquePool();
    const sim = createSimAdapter({ firstTokenMs: 0, tokensPerSecond: 0 });
    const w = await startWorker({
      pools: [pool],
      natsUrl: url,
      config: loadConfig({ NATS_URL: url }),
      registry: { forProtocol: () => sim, all: () => [sim] },
      catalog: testCatalog,
      keepaliveMs: 0,
    });
    const nc: NatsConnection = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    try {
      const job = makeJob(pool, {
        upstream: { id: 'sim/lorem', upstream_model: 'lorem' },
        body: { messages: [{ role: 'user', content: 'go' }], sim: { tokens_per_second: 20, output_tokens: 20 } },
      });
      const run = await sendJob(nc, pool, job);
      expect(run.ack.ok).toBe(true);
      await waitFor(() => run.seen.length >= 2);
      await stopNats(); // the job keeps generating; its end and its usage happen while NATS is down
      await waitFor(() => w.stats().completed === 1, 5000);
      await new Promise((r) => setTimeout(r, 6000)); // past one publish timeout: at least one retry
      expect(w.stats().usagePending).toBe(1);
      await startNats(port);
      await waitFor(() => w.stats().usagePending === 0, 15_000);
      expect(w.stats().usagePublishRetries).toBeGreaterThanOrEqual(1);
      const { msg, count } = await usageOf(nc, pool, job.request_id, 5000);
      expect([count, msg.outcome, msg.prompt_tokens, msg.completion_tokens]).toEqual([1, 'completed', 7, 20]);
    } finally {
      await w.stop();
      await nc.close();
    }
  }, 40_000);
});
