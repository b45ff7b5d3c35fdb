import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { freePort } from '../src/stack/services.ts';
import { readCpuSeconds, spawnEntry, spawnMock, waitForPort, type Proc } from './procs.ts';
import { scenarios } from './scenarios.ts';
import { runTarget, type LoadOptions, type Target } from './load/runner.ts';
import { table } from '../src/cli/table.ts';
import { formatResults } from './load/report.ts';

// The floor of a JavaScript front door on this machine: the same load (a scenario of
// bench/scenarios.json) sent straight to the mock upstream, then through bench/floor-relay in
// `raw` mode (uWebSockets.js in, undici out, bytes passed on) and in `parse` mode (each SSE event
// JSON.parse'd and re-serialised), with the CPU each process spends per request from /proc.
// What the relay spends is what a catraca front door cannot get under without leaving
// JavaScript (or this machine); compare it with the front door's own line in bench/run-stack.ts.

const HELP = `usage: npx tsx bench/floor.ts [--scenario stream-500] [--duration S] [--warmup S] [--rate R | --concurrency N] [--output-tokens N] [--modes raw,parse]
`;

async function spawnRelay(mode: string, upstream: string): Promise<{ proc: Proc; url: string }> {
  const port = await freePort();
  const proc = spawnEntry(`floor-relay-${mode}`, 'bench/floor-relay/server.ts', { FLOOR_PORT: String(port), FLOOR_UPSTREAM: upstream, FLOOR_MODE: mode });
  await waitForPort(port, '127.0.0.1', 20000, proc);
  return { proc, url: `http://127.0.0.1:${port}/v1` };
}

async function main(argv: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      scenario: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      rate: { type: 'string' },
      concurrency: { type: 'string' },
      modes: { type: 'string' },
      'output-tokens': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (v.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const name = v.scenario ?? 'stream-500';
  const sc = scenarios[name];
  if (!sc) throw new Error(`unknown scenario ${name}`);
  const concurrency = v.concurrency ? Number(v.concurrency) : v.rate ? undefined : sc.concurrency;
  const rate = concurrency ? undefined : v.rate ? Number(v.rate) : sc.rate;
  const base: LoadOptions = {
    mode: rate ? 'open' : 'closed',
    ...(rate ? { rate } : { concurrency }),
    durationS: v.duration ? Number(v.duration) : (sc.durationS ?? 20),
    warmupS: v.warmup ? Number(v.warmup) : (sc.warmupS ?? 5),
    stream: sc.stream ?? true,
    maxTokens: sc.maxTokens ?? 64,
    prompt: sc.prompt ?? 'Say something short.',
    timeoutMs: 30000,
    maxInflight: 20000,
    lateMs: 5,
    client: 'http',
  };
  const modes = (v.modes ?? 'raw,parse').split(',').filter(Boolean);
  const mock = await spawnMock(v['output-tokens'] ? { ...sc.mock, outputTokens: Number(v['output-tokens']) } : sc.mock);
  const relays: Array<{ mode: string; proc: Proc; url: string }> = [];
  try {
    for (const m of modes) relays.push({ mode: m, ...(await spawnRelay(m, mock.url)) });
    const rows: (string | number)[][] = [['target', 'req/s', 'errors', 'mock ms/req', 'relay ms/req', 'sum ms/req']];
    const targets: Array<{ t: Target; relay?: Proc }> = [
      { t: { name: 'direct', url: mock.url, key: 'sk-mock-upstream-bench', model: 'mock-gpt' } },
      ...relays.map((r) => ({ t: { name: `relay-${r.mode}`, url: r.url, key: 'sk-mock-upstream-bench', model: 'mock-gpt' }, relay: r.proc })),
    ];
    for (const { t, relay } of targets) {
      let m0 = 0;
      let r0 = 0;
      let mockMs = 0;
      let relayMs = 0;
      process.stderr.write(`${t.name}: ${rate ? `${rate} req/s` : `${concurrency} concurrent`} for ${base.durationS} s\n`);
      const res = await runTarget(t, {
        ...base,
        onMeasure: (edge) => {
          const m = readCpuSeconds(mock.proc.pid) ?? 0;
          const r = relay ? (readCpuSeconds(relay.pid) ?? 0) : 0;
          if (edge === 'start') {
            m0 = m;
            r0 = r;
          } else {
            mockMs = m - m0;
            relayMs = r - r0;
          }
        },
      });
      process.stderr.write(formatResults([res]) + '\n');
      const n = Math.max(1, res.sent);
      const per = (s: number) => Math.round((s * 1e6) / n) / 1000;
      rows.push([t.name, Math.round((res.ok / base.durationS) * 10) / 10, res.errors.total, per(mockMs), relay ? per(relayMs) : '–', per(mockMs + relayMs)]);
    }
    process.stdout.write(`\nCPU per request (from /proc, measured phase):\n${table(rows)}\n`);
  } finally {
    for (const r of relays) await r.proc.stop();
    await mock.proc.stop();
  }
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
      process.exit(1);
    },
  );
}
