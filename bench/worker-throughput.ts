import { connect } from 'nats';
import { loadConfig } from '../src/config.ts';
import { createSimAdapter } from '../src/providers/sim/index.ts';
import { decodeJson, encode, type JobAck } from '../src/bus/messages.ts';
import { decodeFrame, type Frame } from '../src/bus/frames.ts';
import { subjects } from '../src/bus/subjects.ts';
import { makeJob, testCatalog, uniquePool } from '../test/helpers/worker.ts';
import { startWorker } from '../workers/worker.ts';

// Worker-only throughput: `tsx bench/worker-throughput.ts [concurrency=64] [seconds=5] [tokens=16]`.
// One in-process sim worker (no latency) on NATS_URL; the driver acts as the front door (request →
// ack → frames until done). Prints one JSON line: jobs/s, frames/s, job latency, usage backlog.
const [conc = 64, secs = 5, tokens = 16] = process.argv.slice(2).map(Number);
const url = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const pool = uniquePool();
const sim = createSimAdapter({ firstTokenMs: 0, tokensPerSecond: 0 });
const w = await startWorker({
  pools: [pool],
  natsUrl: url,
  config: loadConfig({ NATS_URL: url, LOG_LEVEL: 'warn' }),
  registry: { forProtocol: () => sim, all: () => [sim] },
  catalog: testCatalog,
  keepaliveMs: 0,
});
const nc = await connect({ servers: url });
const upstream = { id: 'sim/lorem', upstream_model: 'lorem' };
// Like the front door: one wildcard subscription for every request's frames, routed by id.
const door = `door${pool}`;
const waiting = new Map<string, (f: Frame) => void>();
nc.subscribe(subjects.streamWildcard(door), {
  callback: (_e, m) => {
    const f = decodeFrame(m.data)!;
    if (f.t === 'done' || f.t === 'error') waiting.get(m.subject.slice(m.subject.lastIndexOf('.') + 1))?.(f);
  },
});
await nc.flush();
const lat: number[] = [];
let jobs = 0;
const until = Date.now() + secs * 1000;
const t0 = Date.now();
await Promise.all(
  Array.from({ length: conc }, async () => {
    while (Date.now() < until) {
      const s = performance.now();
      const job = makeJob(pool, { upstream, body: { messages: [{ role: 'user', content: 'go' }], sim: { output_tokens: tokens } } });
      job.reply_to = subjects.stream(door, job.request_id);
      const end = new Promise<Frame>((r) => waiting.set(job.request_id, r));
      const ack = decodeJson((await nc.request(subjects.job(pool), encode(job), { timeout: 5000 })).data) as JobAck;
      if (!ack.ok) throw new Error(`refused: ${ack.code}`);
      const last = await end;
      waiting.delete(job.request_id);
      if (last.t !== 'done') throw new Error('job failed');
      lat.push(performance.now() - s);
      jobs++;
    }
  }),
);
const elapsed = (Date.now() - t0) / 1000;
lat.sort((a, b) => a - b);
const q = (p: number) => +lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(2);
const stats = w.stats();
await w.stop();
console.log(
  JSON.stringify({
    concurrency: conc,
    tokens,
    jobs,
    jobsPerSecond: Math.round(jobs / elapsed),
    framesPerSecond: Math.round((jobs * (tokens + 1)) / elapsed),
    p50_ms: q(0.5),
    p99_ms: q(0.99),
    firstTokenMs: stats.firstTokenMs,
    usageRetries: stats.usagePublishRetries,
  }),
);
await nc.drain();
