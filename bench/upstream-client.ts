import http from 'node:http';
import { parseArgs } from 'node:util';
import { Agent, type Dispatcher } from 'undici';
import { SseParser } from '../src/providers/shared/sse.ts';
import { spawnMock } from './procs.ts';

// The upstream HTTP client alone: this process streams N chat completions per second from the
// mock vendor (a process of its own) with node:http + keep-alive agent (the workers' transport
// until 2026-11) and with undici's dispatcher (the transport now), each answer parsed as the
// adapters do (SSE split, JSON.parse of every event), and reports this process's CPU per request.
// Rounds alternate so machine noise hits both alike.

const HELP = `usage: npx tsx bench/upstream-client.ts [--rate R] [--seconds S] [--rounds N]
  --rate R      requests per second (default 500)
  --seconds S   per round and client (default 10)
  --rounds N    rounds of (node:http, undici) (default 2)
`;

const body = JSON.stringify({ model: 'mock-gpt', stream: true, messages: [{ role: 'user', content: 'one two three' }], max_tokens: 64 });
const headers = { authorization: 'Bearer sk-bench', 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };

function consume(parser: SseParser, text: string): void {
  for (const ev of parser.push(text)) if (ev.data !== '[DONE]') JSON.parse(ev.data);
}

function nodeHttpClient(url: URL): () => Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
  return () =>
    new Promise((resolve, reject) => {
      const req = http.request(url, { method: 'POST', headers, agent, signal: new AbortController().signal }, (res) => {
        const parser = new SseParser();
        res.setEncoding('utf8');
        res.on('data', (t: string) => consume(parser, t));
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.end(body);
    });
}

function undiciClient(url: URL): () => Promise<void> {
  const agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
  return () =>
    new Promise((resolve, reject) => {
      const parser = new SseParser();
      const decoder = new TextDecoder();
      const handler: Dispatcher.DispatchHandlers = {
        onConnect() {},
        onHeaders: () => true,
        onData(chunk) {
          consume(parser, decoder.decode(chunk, { stream: true }));
          return true;
        },
        onComplete: () => resolve(),
        onError: reject,
      };
      agent.dispatch({ origin: url.origin, path: url.pathname, method: 'POST', headers, body }, handler);
    });
}

async function round(name: string, send: () => Promise<void>, rate: number, seconds: number): Promise<number> {
  for (let i = 0; i < 200; i++) await send(); // warm-up: connections, JIT
  const total = rate * seconds;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const pending: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const wait = t0 + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(send());
  }
  await Promise.all(pending);
  const u = process.cpuUsage(c0);
  const ms = (u.user + u.system) / 1000 / total;
  process.stdout.write(
    `${name.padEnd(10)} ${rate} req/s  CPU ${ms.toFixed(3)} ms/request (user ${(u.user / 1000 / total).toFixed(3)}, system ${(u.system / 1000 / total).toFixed(3)})\n`,
  );
  return ms;
}

const { values: v } = parseArgs({ options: { rate: { type: 'string' }, seconds: { type: 'string' }, rounds: { type: 'string' }, help: { type: 'boolean' } } });
if (v.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const rate = Number(v.rate ?? 500);
const seconds = Number(v.seconds ?? 10);
const mock = await spawnMock({ firstTokenMs: 20, tokensPerSecond: 100, outputTokens: 10 });
try {
  const url = new URL(`${mock.url}/chat/completions`);
  const clients = { 'node:http': nodeHttpClient(url), undici: undiciClient(url) };
  const sums = { 'node:http': 0, undici: 0 };
  const rounds = Number(v.rounds ?? 2);
  for (let r = 0; r < rounds; r++)
    for (const [name, send] of Object.entries(clients)) sums[name as keyof typeof sums] += await round(name, send, rate, seconds);
  process.stdout.write(
    `mean: node:http ${(sums['node:http'] / rounds).toFixed(3)} ms, undici ${(sums.undici / rounds).toFixed(3)} ms (${Math.round((1 - sums.undici / sums['node:http']) * 100)} % less)\n`,
  );
} finally {
  await mock.proc.stop();
}
process.exit(0);
