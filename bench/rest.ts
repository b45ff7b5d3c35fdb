import http from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { LatencyHistogram, type HistogramSummary } from './load/histogram.ts';
import { table } from '../src/cli/table.ts';
import { ROOT } from './procs.ts';
import { startStack } from './run-stack.ts';

// Latency at rest: one request at a time, so nothing queues anywhere and the figure is the path's
// own cost. Four kinds of request, interleaved round-robin so that machine noise hits them alike:
//   healthz       GET /healthz on the front door (the HTTP round trip alone)
//   sim/echo      streamed through the whole stack with the built-in simulator (no upstream HTTP)
//   direct        streamed from the mock vendor itself (first token at once, then 1 token/ms)
//   openai        the same mock request through the whole stack (front door → worker → mock, or
//                 front door → mock with --local-pools)
// added(sim) = sim/echo − healthz; added(openai) = openai − direct.

const HELP = `usage: npx tsx bench/rest.ts [--requests N] [--warmup N]
  --requests N   measured requests of each kind (default 2000)
  --warmup N     unrecorded requests of each kind first (default 200)
  --local-pools LIST   pools the front door serves in its own process (e.g. openai,sim); then no worker process
`;

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

function request(url: string, method: 'GET' | 'POST', key: string | null, body: string | null): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      url,
      {
        method,
        agent,
        headers: {
          ...(key ? { authorization: `Bearer ${key}` } : {}),
          ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        let tail = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (tail = (tail + c).slice(-32)));
        res.on('end', () => {
          if (res.statusCode !== 200) return reject(new Error(`${method} ${url}: HTTP ${res.statusCode} ${tail}`));
          if (body && !tail.includes('[DONE]')) return reject(new Error(`${url}: stream did not end with [DONE]`));
          resolve(performance.now() - t0);
        });
      },
    );
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

async function main(): Promise<void> {
  const { values: v } = parseArgs({
    options: { requests: { type: 'string' }, warmup: { type: 'string' }, 'local-pools': { type: 'string' }, help: { type: 'boolean' } },
  });
  if (v.help) return void process.stdout.write(HELP);
  const n = Number(v.requests ?? 2000);
  const warmup = Number(v.warmup ?? 200);
  const localPools = v['local-pools'];
  const stack = await startStack({ mock: { firstTokenMs: 0, tokensPerSecond: 1000, outputTokens: 10 }, localPools, workers: localPools ? 0 : 1 });
  try {
    const gw = stack.gatewayUrl;
    const chat = (model: string, extra: Record<string, unknown> = {}) =>
      JSON.stringify({
        model,
        stream: true,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten' }],
        ...extra,
      });
    const kinds: Array<{ name: string; run: () => Promise<number> }> = [
      { name: 'healthz', run: () => request(gw.replace(/\/v1$/, '/healthz'), 'GET', null, null) },
      { name: 'sim/echo', run: () => request(`${gw}/chat/completions`, 'POST', stack.key, chat('sim/echo')) },
      { name: 'direct', run: () => request(`${stack.mockUrl}/chat/completions`, 'POST', 'sk-mock-upstream-bench', chat('mock-gpt')) },
      { name: 'openai', run: () => request(`${gw}/chat/completions`, 'POST', stack.key, chat('bench/mock')) },
    ];
    const hist = new Map(kinds.map((k) => [k.name, new LatencyHistogram()]));
    for (let i = 0; i < warmup + n; i++) {
      for (const k of kinds) {
        const ms = await k.run();
        if (i >= warmup) hist.get(k.name)!.record(ms);
      }
    }
    const s = Object.fromEntries([...hist].map(([k, h]) => [k, h.summary()])) as Record<string, HistogramSummary>;
    const added = (a: string, b: string) => ({ p50: round(s[a].p50 - s[b].p50), p90: round(s[a].p90 - s[b].p90), p99: round(s[a].p99 - s[b].p99) });
    const doc = {
      requests: n,
      local_pools: localPools ?? '',
      latency_ms: s,
      added_ms: { sim_echo_over_healthz: added('sim/echo', 'healthz'), openai_over_direct: added('openai', 'direct') },
    };
    const file = join(ROOT, 'bench', 'results', `rest-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify(doc, null, 2) + '\n');
    process.stdout.write(
      table([['request', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'], ...kinds.map((k) => [k.name, s[k.name].p50, s[k.name].p90, s[k.name].p99, s[k.name].max])]) +
        '\n\nadded by the stack (one request at a time):\n' +
        table([
          ['path', 'p50 +ms', 'p90 +ms', 'p99 +ms'],
          ['sim/echo over healthz', doc.added_ms.sim_echo_over_healthz.p50, doc.added_ms.sim_echo_over_healthz.p90, doc.added_ms.sim_echo_over_healthz.p99],
          ['openai over direct mock', doc.added_ms.openai_over_direct.p50, doc.added_ms.openai_over_direct.p90, doc.added_ms.openai_over_direct.p99],
        ]) +
        `\n\nresults: ${file}\n`,
    );
  } finally {
    agent.destroy();
    await stack.stop();
  }
}

const round = (x: number) => Math.round(x * 1000) / 1000;

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`error: ${(err as Error).stack ?? err}\n`);
    process.exit(2);
  },
);
