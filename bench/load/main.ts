import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ROOT, spawnMock, type Proc } from '../procs.ts';
import { scenarios, type Scenario } from '../scenarios.ts';
import { checkGoals, errorRate, formatGoals, formatOverheads, formatResults, overheads, type GoalCheck } from './report.ts';
import { runTarget, type LoadOptions, type Target, type TargetResult } from './runner.ts';

const HELP = `catraca load runner: the same load against several targets, one after the other.

usage: npx tsx bench/load/main.ts [--scenario NAME] --target NAME=URL [--target NAME=URL …] [options]

targets (base URLs ending in /v1; the first is the baseline the others are compared with):
  --target NAME=URL        e.g. --target direct=http://127.0.0.1:9100/v1 --target gateway=http://127.0.0.1:8080/v1
  --spawn-mock             start bench/mock-upstream as a process (scenario's mock timing) and add it as target "direct" first
  --key [NAME=]KEY         API key for one target (or all); env BENCH_KEY_<NAME> or BENCH_KEY
  --model [NAME=]MODEL     model name for one target (or all); default from the scenario (bench/mock)

load (a --scenario sets all of these; flags override it):
  --scenario NAME          ${Object.keys(scenarios).join(', ')}
  --rate RPS               open loop: constant arrival rate
  --concurrency N          closed loop: N requests in flight, each sent when the previous ends
  --duration S             measured seconds (default 30)
  --warmup S               unrecorded seconds at the same load before measuring (default 5)
  --stream | --no-stream   streamed (SSE) or not
  --max-tokens N           max_tokens in the body (default 64)
  --prompt TEXT
  --timeout-ms MS          per-request timeout (default 30000)
  --max-inflight N         open loop: a due request is dropped when N are open (default 20000)
  --late-ms MS             open loop: a request sent more than MS after its due time is "late" (default 5)
  --client http|fetch      node:http keep-alive Agent (default) or the built-in fetch (undici)
  --ladder R1,R2,…         open loop at each rate in turn (per target); reports the highest "clean" rate
                           (no error, no drop, ≤ 1 % of sends late) and stops a target at its first unclean rate

output:
  --out FILE               JSON results (default bench/results/<scenario>-<timestamp>.json)
  --no-save                do not write the JSON file
  --json                   print the JSON results on stdout instead of tables
  --check                  exit 1 when a scenario goal fails
  -h, --help
`;

function parse(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: {
      scenario: { type: 'string' },
      target: { type: 'string', multiple: true },
      'spawn-mock': { type: 'boolean' },
      key: { type: 'string', multiple: true },
      model: { type: 'string', multiple: true },
      rate: { type: 'string' },
      concurrency: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      stream: { type: 'boolean' },
      'no-stream': { type: 'boolean' },
      'max-tokens': { type: 'string' },
      prompt: { type: 'string' },
      'timeout-ms': { type: 'string' },
      'max-inflight': { type: 'string' },
      'late-ms': { type: 'string' },
      client: { type: 'string' },
      ladder: { type: 'string' },
      out: { type: 'string' },
      'no-save': { type: 'boolean' },
      json: { type: 'boolean' },
      check: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: false,
  });
  return values;
}

function num(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a non-negative number, got ${v}`);
  return n;
}

/** `NAME=VALUE` or a bare `VALUE` (applies to every target). */
function perTarget(list: string[] | undefined): { all?: string; by: Record<string, string> } {
  const out: { all?: string; by: Record<string, string> } = { by: {} };
  for (const item of list ?? []) {
    const m = /^([A-Za-z0-9_-]+)=(.*)$/.exec(item);
    if (m && !item.includes('://')) out.by[m[1]!] = m[2]!;
    else out.all = item;
  }
  return out;
}

export async function main(argv: string[]): Promise<number> {
  const v = parse(argv);
  if (v.help) {
    process.stdout.write(HELP);
    return 0;
  }
  let sc: Scenario | undefined;
  if (v.scenario) {
    sc = scenarios[v.scenario];
    if (!sc) throw new Error(`unknown scenario ${v.scenario}; known: ${Object.keys(scenarios).join(', ')}`);
  }
  const rate = num(v.rate, 'rate') ?? (v.concurrency ? undefined : sc?.rate);
  const concurrency = num(v.concurrency, 'concurrency') ?? (v.rate ? undefined : sc?.concurrency);
  const ladder = v.ladder ? v.ladder.split(',').map((x) => num(x.trim(), 'ladder')!) : undefined;
  if (!rate && !concurrency && !ladder) throw new Error('give --scenario, --rate, --concurrency or --ladder (see --help)');
  const base: LoadOptions = {
    mode: concurrency && !ladder ? 'closed' : 'open',
    ...(rate ? { rate } : {}),
    ...(concurrency ? { concurrency } : {}),
    durationS: num(v.duration, 'duration') ?? sc?.durationS ?? 30,
    warmupS: num(v.warmup, 'warmup') ?? sc?.warmupS ?? 5,
    stream: v['no-stream'] ? false : v.stream ? true : (sc?.stream ?? true),
    maxTokens: num(v['max-tokens'], 'max-tokens') ?? sc?.maxTokens ?? 64,
    prompt: v.prompt ?? sc?.prompt ?? 'Say something short.',
    timeoutMs: num(v['timeout-ms'], 'timeout-ms') ?? sc?.timeoutMs ?? 30000,
    maxInflight: num(v['max-inflight'], 'max-inflight') ?? sc?.maxInflight ?? 20000,
    lateMs: num(v['late-ms'], 'late-ms') ?? sc?.lateMs ?? 5,
    client: (v.client ?? 'http') as 'http' | 'fetch',
  };
  if (base.client !== 'http' && base.client !== 'fetch') throw new Error('--client must be http or fetch');

  const keys = perTarget(v.key);
  const models = perTarget(v.model);
  const targets: Target[] = [];
  let mock: Proc | undefined;
  const mockParams = sc?.mock ?? scenarios['stream-500']!.mock;
  if (v['spawn-mock']) {
    const m = await spawnMock(mockParams);
    mock = m.proc;
    targets.push({ name: 'direct', url: m.url, key: keys.by.direct ?? 'sk-bench-direct', model: models.by.direct ?? models.all ?? sc?.model ?? 'bench/mock' });
  }
  for (const t of v.target ?? []) {
    const m = /^([A-Za-z0-9_-]+)=(.+)$/.exec(t);
    const name = m ? m[1]! : `target${targets.length + 1}`;
    const url = m ? m[2]! : t;
    const envKey = process.env[`BENCH_KEY_${name.toUpperCase().replace(/-/g, '_')}`];
    const key = keys.by[name] ?? envKey ?? keys.all ?? process.env.BENCH_KEY;
    targets.push({ name, url, model: models.by[name] ?? models.all ?? sc?.model ?? 'bench/mock', ...(key ? { key } : {}) });
  }
  if (!targets.length) throw new Error('no target: give --target NAME=URL or --spawn-mock');
  for (const t of targets) if (!/^https?:\/\//.test(t.url)) throw new Error(`target ${t.name}: URL must start with http:// or https://`);

  const log = (s: string) => process.stderr.write(s + '\n');
  const scenarioName = v.scenario ?? (ladder ? 'ladder' : concurrency ? `closed-${concurrency}` : `open-${rate}`);
  const startedAt = new Date();
  const results: TargetResult[] = [];
  const ladderOut: Array<{ target: string; steps: Array<{ rate: number; ok: boolean; result: TargetResult }>; highest_clean_rate: number | null }> = [];
  try {
    if (ladder) {
      for (const t of targets) {
        const steps: Array<{ rate: number; ok: boolean; result: TargetResult }> = [];
        let highest: number | null = null;
        for (const r of ladder) {
          log(`${t.name}: ${r} req/s for ${base.durationS} s (warm-up ${base.warmupS} s), ${base.stream ? 'streamed' : 'not streamed'}`);
          const res = await runTarget(t, { ...base, mode: 'open', rate: r });
          const clean = res.errors.total === 0 && res.dropped === 0 && res.late <= res.sent * 0.01;
          steps.push({ rate: r, ok: clean, result: res });
          log(
            formatResults([res]) + `\n→ ${clean ? 'clean' : 'NOT clean'} (late ${res.late} of ${res.sent}, dispatch lag p99 ${res.dispatch_lag_ms.p99} ms)\n`,
          );
          if (!clean) break;
          highest = r;
        }
        ladderOut.push({ target: t.name, steps, highest_clean_rate: highest });
        results.push(...steps.map((s) => s.result));
      }
    } else {
      for (const t of targets) {
        const what = base.mode === 'open' ? `${base.rate} req/s` : `${base.concurrency} concurrent`;
        log(`${t.name}: ${what} for ${base.durationS} s (warm-up ${base.warmupS} s), ${base.stream ? 'streamed' : 'not streamed'}, ${t.url}`);
        results.push(await runTarget(t, base));
      }
    }
  } finally {
    if (mock) await mock.stop();
  }

  const ov = ladder ? [] : overheads(results);
  const goals: GoalCheck[] = sc && !ladder ? checkGoals(results, ov, sc.goals) : [];
  const doc = {
    scenario: scenarioName,
    started_at: startedAt.toISOString(),
    options: base,
    host: { cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model ?? '', node: process.version, mem_gib: Math.round(os.totalmem() / 2 ** 30) },
    mock: v['spawn-mock'] ? mockParams : undefined,
    results,
    overhead: ov,
    goals,
    ...(ladder
      ? {
          ladder: ladderOut.map((l) => ({
            target: l.target,
            highest_clean_rate: l.highest_clean_rate,
            steps: l.steps.map((s) => ({
              rate: s.rate,
              clean: s.ok,
              achieved_rps: s.result.achieved_rps,
              errors: s.result.errors.total,
              dropped: s.result.dropped,
              late: s.result.late,
              p99_ms: s.result.total_ms.p99,
              runner_cpu_pct: s.result.runner.cpu_pct,
            })),
          })),
        }
      : {}),
  };
  if (!v['no-save']) {
    const file = v.out ?? join(ROOT, 'bench', 'results', `${scenarioName}-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, JSON.stringify(doc, null, 2) + '\n');
    log(`results: ${file}`);
  }
  if (v.json) process.stdout.write(JSON.stringify(doc) + '\n');
  else {
    const parts = [formatResults(results)];
    if (ov.length) parts.push('overhead vs ' + results[0]!.target + ':\n' + formatOverheads(ov));
    if (goals.length) parts.push('goals (' + scenarioName + '):\n' + formatGoals(goals));
    for (const l of ladderOut) parts.push(`${l.target}: highest clean rate (no error, no drop, ≤ 1 % late): ${l.highest_clean_rate ?? 'none'} req/s`);
    process.stdout.write(parts.join('\n\n') + '\n');
  }
  if (v.check && goals.some((g) => !g.pass)) return 1;
  if (!ladder && results.some((r) => errorRate(r) > 0) && v.check) return 1;
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`error: ${(err as Error).message}\n`);
      process.exit(2);
    },
  );
}
