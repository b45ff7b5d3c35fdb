import http from 'node:http';
import { startMockUpstream } from './server.ts';

// The mock's own ceiling: `tsx bench/mock-upstream/ceiling.ts [concurrency=64] [seconds=5] [outputTokens=16]`.
// Streams chat completions (include_usage) over keep-alive connections from this same process, so
// the figure is a lower bound of what the mock alone can serve. Prints one JSON line.
const [conc = 64, secs = 5, tokens = 16] = process.argv.slice(2).map(Number);
const url = process.env.MOCK_URL;
const mock = url ? null : await startMockUpstream({ outputTokens: tokens });
const target = new URL(`${url ?? mock!.url}/chat/completions`);
const agent = new http.Agent({ keepAlive: true, maxSockets: conc });
const body = JSON.stringify({ model: 'mock-gpt', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });

let done = 0;
let bytes = 0;
const lat: number[] = [];
const until = Date.now() + secs * 1000;
const one = () =>
  new Promise<void>((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      target,
      { method: 'POST', agent, headers: { authorization: 'Bearer sk-bench', 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => {
          lat.push(performance.now() - t0);
          done++;
          resolve();
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
const t0 = Date.now();
await Promise.all(
  Array.from({ length: conc }, async () => {
    while (Date.now() < until) await one();
  }),
);
const elapsed = (Date.now() - t0) / 1000;
lat.sort((a, b) => a - b);
const q = (p: number) => +lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(2);
console.log(
  JSON.stringify({
    concurrency: conc,
    seconds: +elapsed.toFixed(2),
    outputTokens: tokens,
    requests: done,
    rps: Math.round(done / elapsed),
    tokensPerSecond: Math.round((done * tokens) / elapsed),
    MBps: +(bytes / elapsed / 1e6).toFixed(1),
    p50_ms: q(0.5),
    p99_ms: q(0.99),
  }),
);
agent.destroy();
await mock?.close();
