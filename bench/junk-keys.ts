// Junk keys beside real traffic: real requests (bench/mock, not streamed) at --real-rate, first
// alone (quiet), then with a flood of random, well-shaped API keys (none exists) at --junk-rate:
//   one    every junk request from the runner's own address (the per-address limit, 429 before
//          any database read, after GATEWAY_UNKNOWN_KEYS_PER_MINUTE lookups)
//   many   each junk request with its own client address (X-Forwarded-For from a trusted proxy):
//          every junk key costs a PostgreSQL lookup, on the lookups' own capped pool
//   fresh  no junk: a key just made, opened by --fresh-requests streamed requests at once from the
//          runner's address (a batch job behind one NAT); every one must be served, and cost one
//          lookup (the requests that wait on a lookup already running take no token of the limit)
// Reported per phase: the real traffic's p50/p99/max and its errors (503s), what the junk got
// (by status), and the front door's PostgreSQL key lookups (catraca_key_lookups_total).
//
//   npx tsx bench/junk-keys.ts [--seconds 10] [--real-rate 100] [--junk-rate 5000] [--phases quiet,one,many,fresh] [--fresh-requests 5000] [--cpu-prof DIR]
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { generateApiKey } from '../src/auth/keys.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { freePort } from '../src/stack/services.ts';
import { readCpuSeconds, readCpuSecondsOfTree } from './procs.ts';
import { runTarget, type TargetResult } from './load/runner.ts';
import { startStack, topFrames } from './run-stack.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    'real-rate': { type: 'string', default: '100' },
    'junk-rate': { type: 'string', default: '5000' },
    phases: { type: 'string', default: 'quiet,one,many' },
    'max-inflight': { type: 'string', default: '4000' },
    'fresh-requests': { type: 'string', default: '5000' },
    'cpu-prof': { type: 'string' },
    // internal: this script run as the flood's own process (its event loop apart from the runner's)
    flood: { type: 'string' },
    ms: { type: 'string' },
    many: { type: 'boolean' },
  },
});
const seconds = Number(values.seconds);
const realRate = Number(values['real-rate']);
const junkRate = Number(values['junk-rate']);
const maxInflight = Number(values['max-inflight']);

interface JunkResult {
  sent: number;
  dropped: number;
  achieved_rps: number;
  by_status: Record<string, number>;
}

/** Open loop of junk-key requests for `ms`: each a new random key; `many`: each from its own address. */
async function flood(url: string, ms: number, many: boolean, stop: { now: boolean }): Promise<JunkResult> {
  const u = new URL(`${url}/chat/completions`);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const body = JSON.stringify({ model: 'bench/mock', messages: [{ role: 'user', content: 'junk' }], max_tokens: 8 });
  const byStatus: Record<string, number> = {};
  let sent = 0;
  let dropped = 0;
  let inflight = 0;
  let seq = 0;
  const count = (k: string) => (byStatus[k] = (byStatus[k] ?? 0) + 1);
  const send = () => {
    inflight++;
    sent++;
    const n = seq++;
    const headers: Record<string, string | number> = {
      authorization: `Bearer ${generateApiKey()}`,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...(many ? { 'x-forwarded-for': `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}` } : {}),
    };
    const req = http.request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers }, (res) => {
      res.resume();
      res.on('end', () => {
        inflight--;
        count(String(res.statusCode));
      });
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      inflight--;
      count(`conn_${err.code ?? 'error'}`);
    });
    req.end(body);
  };
  const t0 = performance.now();
  let due = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const elapsed = performance.now() - t0;
      const target = Math.min(Math.floor((elapsed / 1000) * junkRate), Math.floor((ms / 1000) * junkRate));
      while (due < target) {
        due++;
        if (inflight >= maxInflight) dropped++;
        else send();
      }
      if (elapsed >= ms || stop.now) return resolve();
      setTimeout(tick, 1);
    };
    tick();
  });
  const wall = (performance.now() - t0) / 1000;
  while (inflight > 0) await new Promise((r) => setTimeout(r, 20));
  agent.destroy();
  return { sent, dropped, achieved_rps: Math.round(sent / wall), by_status: byStatus };
}

/** The flood in a child process of its own, so that its sending never delays the real traffic's runner. */
function floodProcess(url: string, ms: number, many: boolean): Promise<JunkResult> {
  const args = [
    ...process.execArgv,
    fileURLToPath(import.meta.url),
    '--flood',
    url,
    '--ms',
    String(ms),
    '--junk-rate',
    String(junkRate),
    '--max-inflight',
    String(maxInflight),
  ];
  const child = spawn(process.execPath, many ? [...args, '--many'] : args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  return new Promise((resolve, reject) => child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`flood exited ${code}`)))));
}

if (values.flood) {
  process.stdout.write(JSON.stringify(await flood(values.flood, Number(values.ms), values.many === true, { now: false })));
  process.exit(0);
}

/** A key just made for `tenantId`, then `n` streamed requests with it at once from this address; what they got, by status. */
async function freshKeyBurst(url: string, databaseUrl: string, tenantId: string, n: number): Promise<{ by_status: Record<string, number>; ms: number }> {
  const db = createPool(databaseUrl, 1);
  const { key } = await createApiKey(db, { tenantId, label: 'fresh burst', models: null }).finally(() => db.end());
  const u = new URL(`${url}/chat/completions`);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const body = JSON.stringify({ model: 'bench/mock', stream: true, messages: [{ role: 'user', content: 'fresh' }], max_tokens: 8 });
  const byStatus: Record<string, number> = {};
  const count = (k: string) => (byStatus[k] = (byStatus[k] ?? 0) + 1);
  const t0 = performance.now();
  await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<void>((resolve) => {
          const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
          const req = http.request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => res.statusCode !== 200 && (text += c));
            res.on('end', () => {
              const code = res.statusCode === 200 ? '' : ` ${(safeParse(text) as { error?: { code?: string } } | null)?.error?.code ?? ''}`;
              count(`${res.statusCode}${code}`);
              resolve();
            });
          });
          req.on('error', (err: NodeJS.ErrnoException) => {
            count(`conn_${err.code ?? 'error'}`);
            resolve();
          });
          req.end(body);
        }),
    ),
  );
  agent.destroy();
  return { by_status: byStatus, ms: Math.round(performance.now() - t0) };
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

async function keyMetrics(port: number): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const m of text.matchAll(/^(catraca_key_[a-z_]+)(?:\{([^}]*)\})? (\d+)$/gm)) {
      const label = (m[2] ?? '').split(',').find((l) => !l.startsWith('instance=')) ?? '';
      out[label ? `${m[1]}{${label}}` : m[1]] = Number(m[3]);
    }
  } catch {
    // a front door without these metrics (an older build)
  }
  return out;
}

const metricsPort = await freePort();
const stack = await startStack({
  mock: { firstTokenMs: 0, tokensPerSecond: 0, outputTokens: 10 },
  gatewayEnv: { GATEWAY_TRUSTED_PROXIES: '127.0.0.1', METRICS_PORT: String(metricsPort) },
  cpuProfDir: values['cpu-prof'],
});
const rows: Array<Record<string, unknown>> = [];
const gatewayPid = stack.procs.find((p) => p.name === 'gateway')!.pid;
/** CPU seconds of the front door and of PostgreSQL (its whole process tree) so far. */
const cpuNow = () => ({ gateway: readCpuSeconds(gatewayPid) ?? 0, postgres: stack.postmasterPid ? readCpuSecondsOfTree(stack.postmasterPid) : 0 });
const round = (x: number) => Math.round(x * 100) / 100;
try {
  const real = { name: 'real', url: stack.gatewayUrl, key: stack.key, model: 'bench/mock' };
  const load = {
    mode: 'open' as const,
    rate: realRate,
    durationS: seconds,
    warmupS: 2,
    stream: false,
    maxTokens: 16,
    prompt: 'Say something.',
    timeoutMs: 30000,
    maxInflight: 5000,
    lateMs: 5,
    client: 'http' as const,
  };
  for (const phase of values.phases!.split(',')) {
    const before = await keyMetrics(metricsPort);
    let junk: JunkResult | null = null;
    let result: TargetResult;
    const cpu0 = cpuNow();
    if (phase === 'fresh') {
      const fresh = await freshKeyBurst(stack.gatewayUrl, stack.databaseUrl, stack.tenantIds[0]!, Number(values['fresh-requests']));
      const after = await keyMetrics(metricsPort);
      rows.push({
        phase,
        fresh_requests: Number(values['fresh-requests']),
        fresh_status: fresh.by_status,
        fresh_ms: fresh.ms,
        pg_lookups_found: (after['catraca_key_lookups_total{result="found"}'] ?? 0) - (before['catraca_key_lookups_total{result="found"}'] ?? 0),
        refused_rate_limited:
          (after['catraca_key_refusals_total{reason="rate_limited"}'] ?? 0) - (before['catraca_key_refusals_total{reason="rate_limited"}'] ?? 0),
      });
      console.log(JSON.stringify(rows.at(-1)));
      continue;
    }
    if (phase === 'quiet') result = await runTarget(real, load);
    else {
      // the flood starts with the warm-up and ends with the measured phase
      const flooding = floodProcess(stack.gatewayUrl, (seconds + 2.2) * 1000, phase === 'many');
      result = await runTarget(real, load);
      junk = await flooding;
    }
    const cpu1 = cpuNow();
    const after = await keyMetrics(metricsPort);
    const delta = (k: string) => (after[k] ?? 0) - (before[k] ?? 0);
    rows.push({
      phase,
      real_ok: result.ok,
      real_errors: { ...result.errors.by_type, ...(result.dropped ? { dropped: result.dropped } : {}) },
      real_p50_ms: result.total_ms.p50,
      real_p99_ms: result.total_ms.p99,
      real_max_ms: result.total_ms.max,
      junk_rps: junk?.achieved_rps ?? 0,
      junk_dropped: junk?.dropped ?? 0,
      junk_status: junk?.by_status ?? {},
      pg_lookups_not_found: delta('catraca_key_lookups_total{result="not_found"}'),
      pg_lookups_found: delta('catraca_key_lookups_total{result="found"}'),
      refused_rate_limited: delta('catraca_key_refusals_total{reason="rate_limited"}'),
      refused_busy: delta('catraca_key_refusals_total{reason="busy"}'),
      cpu_s: { gateway: round(cpu1.gateway - cpu0.gateway), postgres: round(cpu1.postgres - cpu0.postgres) },
      load_1m: result.loadavg_1m,
    });
    console.log(JSON.stringify(rows.at(-1)));
  }
} finally {
  await stack.stop();
}
if (values['cpu-prof']) {
  const dir = join(values['cpu-prof'], 'gateway');
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.cpuprofile'))) console.table(topFrames(join(dir, f), 25));
}
console.table(
  rows.map((r) => ({
    ...r,
    real_errors: JSON.stringify(r.real_errors),
    junk_status: JSON.stringify(r.junk_status),
    cpu_s: JSON.stringify(r.cpu_s),
    load_1m: JSON.stringify(r.load_1m),
  })),
);
