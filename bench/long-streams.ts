import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { LatencyHistogram } from './load/histogram.ts';
import { table } from '../src/cli/table.ts';
import { readCpuSeconds, readCpuSecondsOfTree, ROOT } from './procs.ts';
import { startStack } from './run-stack.ts';

// Thousands of long streams at once (agents, reasoning models): N streamed requests that each
// wait `--first-token-ms` for their first token at the mock vendor and then get 10 tokens, all
// open together. Reports how many were served and refused, TTFT, peak RSS of every process and
// the memory and CPU each in-flight stream costs in the front door and the workers:
//   per-stream memory = (RSS with every stream waiting − RSS before) / N, per process.

const HELP = `usage: npx tsx bench/long-streams.ts [--streams N] [--first-token-ms MS] [--ramp-s S] [--workers K] [--gateways G] [--worker-concurrency C]
  --streams N            concurrent streams (default 5000)
  --first-token-ms MS    the vendor's wait before the first token (default 5000)
  --ramp-s S             open the streams over S seconds (default 2)
  --workers K / --gateways G   processes (default 1 / 1)
  --worker-concurrency C WORKER_CONCURRENCY of each worker (default: the worker's own default)
  --local-pools LIST     pools every front door serves in its own process (with --workers 0: no worker process)
`;

function readRssKiB(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  const { values: v } = parseArgs({
    options: {
      streams: { type: 'string' },
      'first-token-ms': { type: 'string' },
      'ramp-s': { type: 'string' },
      workers: { type: 'string' },
      gateways: { type: 'string' },
      'worker-concurrency': { type: 'string' },
      'local-pools': { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (v.help) return void process.stdout.write(HELP);
  const n = Number(v.streams ?? 5000);
  const firstTokenMs = Number(v['first-token-ms'] ?? 5000);
  const rampS = Number(v['ramp-s'] ?? 2);
  const stack = await startStack({
    mock: { firstTokenMs, tokensPerSecond: 100, outputTokens: 10 },
    workers: Number(v.workers ?? 1),
    gateways: Number(v.gateways ?? 1),
    workerConcurrency: v['worker-concurrency'] ? Number(v['worker-concurrency']) : undefined,
    localPools: v['local-pools'],
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  try {
    const rss = () => Object.fromEntries(stack.procs.map((p) => [p.name, readRssKiB(p.pid)]));
    const cpu = () => ({
      ...Object.fromEntries(stack.procs.map((p) => [p.name, readCpuSeconds(p.pid)])),
      postgres: stack.postmasterPid ? readCpuSecondsOfTree(stack.postmasterPid) : null,
    });
    const peak: Record<string, number> = {};
    let inFlight = 0;
    let maxInFlight = 0;
    let atMax: Record<string, number | null> = {};
    const ttft = new LatencyHistogram();
    const total = new LatencyHistogram();
    let outcome: Record<string, number> = {};
    // warm the path (JIT, pools, key cache) with a few requests first
    await Promise.all(Array.from({ length: 20 }, (_, i) => one(i)));
    await new Promise((r) => setTimeout(r, 1000));
    outcome = {};
    maxInFlight = 0;
    const before = rss();
    const cpu0 = cpu();
    const sampler = setInterval(() => {
      const now = rss();
      for (const [k, val] of Object.entries(now)) if (val !== null && val > (peak[k] ?? 0)) peak[k] = val;
      if (inFlight >= maxInFlight) atMax = now;
    }, 250);
    function one(i: number): Promise<void> {
      return new Promise((resolve) => {
        const url = new URL(`${stack.gatewayUrls[i % stack.gatewayUrls.length]}/chat/completions`);
        const body = JSON.stringify({ model: 'bench/mock', stream: true, max_tokens: 64, messages: [{ role: 'user', content: 'Say something short.' }] });
        const t0 = performance.now();
        let first = 0;
        inFlight++;
        if (inFlight > maxInFlight) maxInFlight = inFlight;
        const done = (what: string) => {
          inFlight--;
          outcome[what] = (outcome[what] ?? 0) + 1;
          resolve();
        };
        const req = http.request(
          url,
          {
            method: 'POST',
            agent,
            headers: {
              authorization: `Bearer ${stack.keys[i % stack.keys.length]}`,
              'content-type': 'application/json',
              'content-length': Buffer.byteLength(body),
            },
          },
          (res) => {
            if (res.statusCode !== 200) {
              let text = '';
              res.setEncoding('utf8');
              res.on('data', (c: string) => (text += c));
              res.on('end', () => done(`http_${res.statusCode}_${/"code":"([^"]+)"/.exec(text)?.[1] ?? ''}`));
              return;
            }
            let tail = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => {
              if (!first && c.includes('"content":"') && !c.includes('"content":""')) first = performance.now();
              tail = (tail + c).slice(-64);
            });
            res.on('end', () => {
              if (!tail.includes('[DONE]') || tail.includes('"error"')) return done('stream_error');
              if (first) ttft.record(first - t0);
              total.record(performance.now() - t0);
              done('ok');
            });
            res.on('error', () => done('aborted'));
          },
        );
        req.on('error', (e: NodeJS.ErrnoException) => done(`conn_${e.code ?? 'error'}`));
        req.end(body);
      });
    }
    const started = Date.now();
    const all: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const due = started + (i * rampS * 1000) / n;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      all.push(one(i));
    }
    await Promise.all(all);
    clearInterval(sampler);
    const cpu1 = cpu();
    const rows = stack.procs.map((p) => {
      const b = before[p.name];
      const a = atMax[p.name];
      const perStream = b !== null && a !== null && a !== undefined ? Math.round(((a - b) / maxInFlight) * 100) / 100 : null;
      const c0 = cpu0[p.name as keyof typeof cpu0];
      const c1 = cpu1[p.name as keyof typeof cpu1];
      const cpuMs =
        c0 !== null && c1 !== null && c0 !== undefined && c1 !== undefined ? Math.round((((c1 as number) - (c0 as number)) * 1e6) / n) / 1000 : null;
      return {
        process: p.name,
        rss_before_mib: b === null ? null : Math.round(b / 102.4) / 10,
        rss_peak_mib: Math.round((peak[p.name] ?? 0) / 102.4) / 10,
        kib_per_stream: perStream,
        cpu_ms_per_stream: cpuMs,
      };
    });
    const stackPeak = rows.filter((r) => r.process !== 'mock-upstream').reduce((s, r) => s + r.rss_peak_mib, 0);
    const doc = {
      streams: n,
      first_token_ms: firstTokenMs,
      ramp_s: rampS,
      workers: Number(v.workers ?? 1),
      gateways: Number(v.gateways ?? 1),
      local_pools: v['local-pools'] ?? '',
      max_in_flight: maxInFlight,
      outcome,
      ttft_ms: ttft.summary(),
      total_ms: total.summary(),
      processes: rows,
      stack_peak_rss_mib: Math.round(stackPeak),
      postgres_cpu_ms_per_stream: cpu0.postgres !== null && cpu1.postgres !== null ? Math.round(((cpu1.postgres - cpu0.postgres) * 1e6) / n) / 1000 : null,
    };
    const file = join(ROOT, 'bench', 'results', `long-streams-${n}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify(doc, null, 2) + '\n');
    process.stdout.write(
      `${n} streams (${firstTokenMs} ms to the first token, 10 tokens), opened over ${rampS} s; max in flight ${maxInFlight}\n` +
        `outcome: ${JSON.stringify(outcome)}\n` +
        `TTFT p50 ${doc.ttft_ms.p50} p99 ${doc.ttft_ms.p99} ms; total p50 ${doc.total_ms.p50} p99 ${doc.total_ms.p99} ms\n\n` +
        table([
          ['process', 'RSS before MiB', 'peak MiB', 'KiB per stream', 'CPU ms per stream'],
          ...rows.map((r) => [r.process, r.rss_before_mib ?? 'n/a', r.rss_peak_mib, r.kib_per_stream ?? 'n/a', r.cpu_ms_per_stream ?? 'n/a']),
        ]) +
        `\nstack peak RSS (all but the mock): ${doc.stack_peak_rss_mib} MiB; PostgreSQL CPU per stream ${doc.postgres_cpu_ms_per_stream} ms\nresults: ${file}\n`,
    );
  } finally {
    agent.destroy();
    await stack.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`error: ${(err as Error).stack ?? err}\n`);
    process.exit(2);
  },
);
