import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { credit } from '../src/billing/ledger.ts';
import { type Cell, table } from '../src/cli/table.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import type { LoadOptions } from './load/runner.ts';
import { readCpuSeconds, readCpuSecondsOfTree, ROOT } from './procs.ts';
import { measureRoute, type RoutePhase, startStack } from './run-stack.ts';
import { scenarios } from './scenarios.ts';
import { localPoolsFor, parseRoutes } from './stack-routes.ts';

// Interactive traffic beside a queue-mode batch, in one sitting on one stack, --rounds times:
//   1. quiet:       stream-500 (or --scenario) through the gateway, no batch;
//   2. a --lines-line chat batch (another tenant's) created; in the first round it runs alone for
//      --alone s first (lines/s, CPU per line);
//   3. with batch:  the same interactive load while the batch keeps running: p50/p99, CPU, lines/s;
//      then the batch cancelled (its running lines finish);
// and a last quiet phase. On this 2-core machine a phase's p99 is set by a second or two of stall
// that comes in any phase (--timeline shows them), so the verdict pools every measured request of
// the quiet phases against every one of the phases with a batch, taken in turn.
// Each interactive phase has its direct phase beside it (bench/run-stack.ts's measureRoute), so the
// added latency is the gateway's over the mock's own at that moment. The batch's lines go to the
// same mock model (bench/mock) through the same front door: BATCH_CONCURRENCY lines at once, none
// while BATCH_PAUSE_IN_FLIGHT interactive requests are in flight at the door (--concurrency and
// --pause-in-flight set them for the front door).

const HELP = `usage: npx tsx bench/batch-interactive.ts [options]

  --scenario NAME        interactive load (default stream-500)
  --duration S           each interactive phase's measured part (default: the scenario's)
  --warmup S             (default: the scenario's)
  --lines N              lines of the batch (default 50000)
  --alone S              seconds the batch runs alone, measured (default 20)
  --concurrency N        BATCH_CONCURRENCY of the front door (default: the gateway's default)
  --pause-in-flight N    BATCH_PAUSE_IN_FLIGHT of the front door (default: the gateway's default)
  --local-pools LIST     default openai,sim (with --workers 0, the front door serves every job)
  --workers N            default 0
  --rounds N             quiet and with-a-batch phases taken in turn N times, a quiet one last (default 3)
  --timeline             a line a second on stderr (and in the results file): the interactive requests
                         that were to start in that second (count, p50, p99, max ms), CPU ms of each
                         process, PostgreSQL's autovacuum workers and active backends, the batch's lines
`;

interface BatchCounts {
  status: string;
  completed: number;
  failed: number;
  total: number;
}

async function api(url: string, key: string, path: string, init: RequestInit = {}): Promise<Record<string, any>> {
  const res = await fetch(url + path, { ...init, headers: { authorization: `Bearer ${key}`, ...(init.headers ?? {}) } });
  const body = await res.json();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path}: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

async function counts(url: string, key: string, id: string): Promise<BatchCounts & { at: number }> {
  const b = await api(url, key, `/batches/${id}`);
  return { status: b.status, ...b.request_counts, at: Date.now() };
}

/** CPU seconds of the stack's processes and PostgreSQL, now. */
function cpuNow(procs: Array<{ name: string; pid: number }>, postmasterPid: number | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of procs) if (p.name !== 'mock-upstream') out[p.name] = readCpuSeconds(p.pid) ?? 0;
  if (postmasterPid) out.postgres = readCpuSecondsOfTree(postmasterPid);
  return out;
}

function cpuMsPer(a: Record<string, number>, b: Record<string, number>, n: number): Record<string, number> {
  const out: Record<string, number> = {};
  let total = 0;
  for (const k of Object.keys(b)) {
    const ms = ((b[k]! - (a[k] ?? 0)) * 1000) / Math.max(1, n);
    out[k] = Math.round(ms * 1000) / 1000;
    total += ms;
  }
  out.stack = Math.round(total * 1000) / 1000;
  return out;
}

/** --timeline: one row a second, to find what is busy in the seconds interactive p99 rises. */
class Timeline {
  readonly rows: Array<Record<string, unknown>> = [];
  private readonly db;
  private readonly latencies = new Map<number, number[]>();
  private phase = 'start';
  private batchId: string | null = null;
  private last: Record<string, number>;
  private readonly t0 = Date.now();
  private readonly timer: NodeJS.Timeout;
  private sampling = false;

  constructor(
    private readonly stack: Awaited<ReturnType<typeof startStack>>,
    private readonly log: (s: string) => void,
  ) {
    this.db = createPool(stack.databaseUrl, 1);
    this.last = this.cpu();
    this.timer = setInterval(() => void this.sample(), 1000);
  }

  label(phase: string) {
    this.phase = phase;
  }
  watchBatch(id: string) {
    this.batchId = id;
  }
  result(intendedAt: number, endedAt: number, ok: boolean) {
    const second = Math.floor((intendedAt - this.t0) / 1000);
    const list = this.latencies.get(second) ?? [];
    list.push(ok ? endedAt - intendedAt : Number.POSITIVE_INFINITY);
    this.latencies.set(second, list);
  }

  private cpu(): Record<string, number> {
    const out = cpuNow(this.stack.procs, this.stack.postmasterPid);
    const mock = this.stack.procs.find((p) => p.name === 'mock-upstream');
    if (mock) out.mock = readCpuSeconds(mock.pid) ?? 0;
    const self = process.cpuUsage();
    out.bench = (self.user + self.system) / 1e6;
    return out;
  }

  private async sample() {
    if (this.sampling) return;
    this.sampling = true;
    try {
      const now = this.cpu();
      const cpuMs: Record<string, number> = {};
      for (const k of Object.keys(now)) cpuMs[k] = Math.round((now[k]! - (this.last[k] ?? 0)) * 1000);
      this.last = now;
      const { rows: av } = await this.db.query(
        `select backend_type, state, wait_event_type, wait_event, left(query, 60) as query from pg_stat_activity
          where pid <> pg_backend_pid() and (backend_type = 'autovacuum worker' or (backend_type = 'client backend' and state = 'active'))`,
      );
      const autovacuum = av.filter((r) => r.backend_type === 'autovacuum worker').map((r) => r.query);
      const active = av.filter((r) => r.backend_type === 'client backend').length;
      const waits = av.filter((r) => r.wait_event).map((r) => `${r.wait_event_type}:${r.wait_event}`);
      let batchLines: number | null = null;
      if (this.batchId) {
        const { rows } = await this.db.query('select completed + failed as n from batches where id = $1', [this.batchId]);
        batchLines = rows[0]?.n ?? null;
      }
      // the requests meant to start two seconds ago have ended by now (a stream lasts ~110 ms)
      const second = Math.floor((Date.now() - this.t0) / 1000) - 2;
      const lat = (this.latencies.get(second) ?? []).sort((a, b) => a - b);
      this.latencies.delete(second);
      const q = (p: number) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]! * 10) / 10 : null);
      const row = {
        s: second,
        phase: this.phase,
        requests: lat.length,
        p50: q(0.5),
        p99: q(0.99),
        max: lat.length ? Math.round(lat.at(-1)! * 10) / 10 : null,
        cpu_ms: cpuMs,
        autovacuum,
        active_backends: active,
        waits,
        batch_lines: batchLines,
      };
      this.rows.push(row);
      this.log(
        `[timeline] ${row.s}s ${row.phase}: n=${row.requests} p50=${row.p50} p99=${row.p99} max=${row.max} cpu=${JSON.stringify(cpuMs)} av=${JSON.stringify(autovacuum)} active=${active} waits=${JSON.stringify(waits)} batch=${batchLines}`,
      );
    } catch (err) {
      this.log(`[timeline] sample failed: ${(err as Error).message}`);
    } finally {
      this.sampling = false;
    }
  }

  async stop() {
    clearInterval(this.timer);
    await this.db.end();
  }
}

async function main(argv: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      scenario: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      lines: { type: 'string' },
      alone: { type: 'string' },
      concurrency: { type: 'string' },
      'pause-in-flight': { type: 'string' },
      'local-pools': { type: 'string' },
      workers: { type: 'string' },
      timeline: { type: 'boolean' },
      rounds: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (v.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const log = (s: string) => process.stderr.write(s + '\n');
  const scenarioName = v.scenario ?? 'stream-500';
  const sc = scenarios[scenarioName];
  if (!sc) throw new Error(`unknown scenario ${scenarioName}`);
  const lines = Number(v.lines ?? 50000);
  const aloneS = Number(v.alone ?? 20);
  const rounds = Number(v.rounds ?? 3);
  const [route] = parseRoutes('chat');
  const gatewayEnv: Record<string, string> = {};
  if (v.concurrency) gatewayEnv.BATCH_CONCURRENCY = v.concurrency;
  if (v['pause-in-flight']) gatewayEnv.BATCH_PAUSE_IN_FLIGHT = v['pause-in-flight'];
  const stack = await startStack({
    natsUrl: process.env.NATS_URL,
    workers: Number(v.workers ?? 0),
    localPools: localPoolsFor(v['local-pools'] ?? 'openai,sim', [route!]),
    gatewayEnv,
    mock: sc.mock,
  });
  const abort = () => void stack.stop().finally(() => process.exit(130));
  process.once('SIGINT', abort);
  process.once('SIGTERM', abort);
  const base: LoadOptions = {
    mode: sc.concurrency ? 'closed' : 'open',
    ...(sc.rate ? { rate: sc.rate } : {}),
    ...(sc.concurrency ? { concurrency: sc.concurrency } : {}),
    durationS: v.duration ? Number(v.duration) : sc.durationS,
    warmupS: v.warmup ? Number(v.warmup) : sc.warmupS,
    stream: sc.stream,
    maxTokens: sc.maxTokens,
    prompt: sc.prompt,
    timeoutMs: sc.timeoutMs,
    maxInflight: sc.maxInflight,
    lateMs: sc.lateMs,
    client: 'http',
  };
  const startedAt = new Date();
  const url = stack.gatewayUrl;
  const timeline = v.timeline ? new Timeline(stack, log) : null;
  // every measured gateway request's latency (from its intended start), by phase: pooled below
  const measured = new Map<string, number[]>();
  const phase = (label: string, onGatewayMeasure?: (edge: 'start' | 'end') => void) => {
    timeline?.label(label);
    const latencies: number[] = [];
    measured.set(label, latencies);
    let measuring = false;
    return measureRoute(stack, {
      route: route!,
      round: 1,
      label,
      base,
      pollMs: 10,
      goals: sc.goals,
      log,
      onGatewayMeasure: (edge) => {
        measuring = edge === 'start';
        timeline?.label(`${label}${edge === 'start' ? ' (measured)' : ' (after)'}`);
        onGatewayMeasure?.(edge);
      },
      onGatewayResult: (r) => {
        timeline?.result(r.intendedAt, r.endedAt, r.ok);
        if (measuring) latencies.push(r.ok ? r.endedAt - r.intendedAt : Number.POSITIVE_INFINITY);
      },
    });
  };
  const doc: Record<string, unknown> = {
    scenario: scenarioName,
    lines,
    rounds,
    alone_s: aloneS,
    gateway_env: gatewayEnv,
    started_at: startedAt.toISOString(),
  };
  const db = createPool(stack.databaseUrl, 1);
  try {
    // the batches: another tenant's, so the interactive tenant's balance and ledger are its own
    const tenant = await createTenant(db, `bench batch ${startedAt.toISOString()}`);
    await credit(db, { tenantId: tenant.id, amountMicros: 1_000_000_000n * 1_000_000n, source: 'grant', note: 'benchmark batch balance' });
    const { key } = await createApiKey(db, { tenantId: tenant.id, label: 'bench batch', models: null });
    const jsonl = Array.from({ length: lines }, (_, i) =>
      JSON.stringify({
        custom_id: `line-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'bench/mock', max_tokens: sc.maxTokens, messages: [{ role: 'user', content: `${sc.prompt} (${i})` }] },
      }),
    ).join('\n');
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([jsonl], { type: 'application/jsonl' }), 'bench.jsonl');
    const t0 = Date.now();
    const file = await api(url, key, '/files', { method: 'POST', body: form });
    const uploadMs = Date.now() - t0;
    log(`input file ${file.id}: ${lines} lines, ${jsonl.length} bytes uploaded in ${uploadMs} ms`);

    const phases: Array<{ label: string; kind: 'quiet' | 'batch'; result: RoutePhase; batch_lines_per_s?: number }> = [];
    const batches: Array<Record<string, unknown>> = [];
    let alone: Record<string, unknown> | null = null;
    for (let round = 1; round <= rounds; round++) {
      const quietLabel = `quiet ${round}`;
      phases.push({ label: quietLabel, kind: 'quiet', result: await phase(quietLabel) });

      const c0 = Date.now();
      const batch = await api(url, key, '/batches', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
      });
      const createMs = Date.now() - c0;
      timeline?.watchBatch(batch.id);
      log(`batch ${batch.id}: ${lines} lines created (enqueued) in ${createMs} ms`);
      let c = await counts(url, key, batch.id);
      while (c.completed + c.failed === 0) {
        await new Promise((r) => setTimeout(r, 200));
        c = await counts(url, key, batch.id);
      }
      if (round === 1) {
        // the batch alone: its pace with the door to itself
        const a0 = await counts(url, key, batch.id);
        const cpuA0 = cpuNow(stack.procs, stack.postmasterPid);
        await new Promise((r) => setTimeout(r, aloneS * 1000));
        const a1 = await counts(url, key, batch.id);
        const cpuA1 = cpuNow(stack.procs, stack.postmasterPid);
        const n = a1.completed + a1.failed - (a0.completed + a0.failed);
        alone = {
          lines: n,
          failed: a1.failed - a0.failed,
          lines_per_s: Math.round((n / ((a1.at - a0.at) / 1000)) * 10) / 10,
          cpu_ms_per_line: cpuMsPer(cpuA0, cpuA1, n),
        };
        log(`batch alone: ${JSON.stringify(alone)}`);
      }
      // interactive beside the batch; its progress over the gateway phase's measured part only
      let at0: Promise<BatchCounts & { at: number }> | undefined;
      let at1: Promise<BatchCounts & { at: number }> | undefined;
      const batchLabel = `with batch ${round}`;
      const result = await phase(batchLabel, (edge) => {
        if (edge === 'start') at0 = counts(url, key, batch.id);
        else at1 = counts(url, key, batch.id);
      });
      const b0 = await at0!;
      const b1 = await at1!;
      const beside = b1.completed + b1.failed - (b0.completed + b0.failed);
      const perS = Math.round((beside / ((b1.at - b0.at) / 1000)) * 10) / 10;
      phases.push({ label: batchLabel, kind: 'batch', result, batch_lines_per_s: perS });
      await api(url, key, `/batches/${batch.id}/cancel`, { method: 'POST' });
      let end = await counts(url, key, batch.id);
      while (end.status !== 'cancelled' && end.status !== 'completed') {
        await new Promise((r) => setTimeout(r, 200));
        end = await counts(url, key, batch.id);
      }
      log(`batch ${round} ended ${end.status}: completed ${end.completed}, failed ${end.failed}, total ${end.total}; beside the load ${beside} lines`);
      batches.push({ id: batch.id, create_ms: createMs, beside_lines: beside, beside_lines_per_s: perS, end });
    }
    const lastLabel = `quiet ${rounds + 1}`;
    phases.push({ label: lastLabel, kind: 'quiet', result: await phase(lastLabel) });

    // every request settled: no hold left (metering may still be settling the last ones)
    for (let i = 0; i < 100; i++) {
      const open = await db.query('select count(*)::int as n from holds where tenant_id = any($1)', [[...stack.tenantIds, tenant.id]]);
      if (open.rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const { rows } = await db.query(
      `select t.id, t.balance_micros::text as balance, t.held_micros::text as held,
              (select count(*) from holds h where h.tenant_id = t.id)::int as open_holds,
              (select count(*) from ledger l where l.tenant_id = t.id and l.kind = 'debit')::int as debits,
              (select coalesce(sum(case when kind = 'credit' then amount_micros else -amount_micros end), 0) from ledger l where l.tenant_id = t.id)::text as ledger_balance
         from tenants t where t.id = any($1)`,
      [[...stack.tenantIds, tenant.id]],
    );
    const ledger = rows.map((r) => ({ ...r, balance_matches_ledger: r.balance === r.ledger_balance }));
    const batchLedger = ledger.find((r) => r.id === tenant.id)!;

    const summary = (p: RoutePhase) => {
      const gw = p.results[1]!;
      const direct = p.results[0]!;
      return {
        p50: gw.total_ms.p50,
        p99: gw.total_ms.p99,
        direct_p50: direct.total_ms.p50,
        direct_p99: direct.total_ms.p99,
        errors: gw.errors.total,
        requests: p.cpu_ms_per_request.requests,
        gateway_ms: p.cpu_ms_per_request.ms.gateway ?? null,
        stack_ms: p.cpu_ms_per_request.stack_ms,
      };
    };
    const rowsOut: Cell[][] = [
      ['interactive phase', 'p50 ms', 'p99 ms', 'direct p50 / p99', 'errors', 'gateway ms CPU/req', 'stack ms CPU/req', 'batch lines/s'],
    ];
    const perPhase = phases.map((p) => ({ label: p.label, kind: p.kind, ...summary(p.result), batch_lines_per_s: p.batch_lines_per_s ?? 0 }));
    for (const s of perPhase)
      rowsOut.push([s.label, s.p50, s.p99, `${s.direct_p50} / ${s.direct_p99}`, s.errors, s.gateway_ms ?? 'n/a', s.stack_ms, s.batch_lines_per_s]);
    // pooled: every measured request of the quiet phases, and of the phases with a batch
    const pooled = (kind: 'quiet' | 'batch') => {
      const all = phases.filter((p) => p.kind === kind).flatMap((p) => measured.get(p.label) ?? []);
      all.sort((a, b) => a - b);
      const q = (f: number) => Math.round(all[Math.min(all.length - 1, Math.ceil(f * all.length) - 1)]! * 10) / 10;
      const ofKind = perPhase.filter((p) => p.kind === kind);
      const mean = (f: (p: (typeof perPhase)[number]) => number | null) =>
        Math.round((ofKind.reduce((sum, p) => sum + (f(p) ?? 0), 0) / ofKind.length) * 1000) / 1000;
      return { requests: all.length, p50: q(0.5), p99: q(0.99), gateway_ms: mean((p) => p.gateway_ms), stack_ms: mean((p) => p.stack_ms) };
    };
    const quietAll = pooled('quiet');
    const batchAll = pooled('batch');
    const linesPerS = Math.round((batches.reduce((s, b) => s + (b.beside_lines as number), 0) / (rounds * base.durationS)) * 10) / 10;
    rowsOut.push([`all quiet (${quietAll.requests} requests)`, quietAll.p50, quietAll.p99, '', '', quietAll.gateway_ms, quietAll.stack_ms, 0]);
    rowsOut.push([`all with a batch (${batchAll.requests} requests)`, batchAll.p50, batchAll.p99, '', '', batchAll.gateway_ms, batchAll.stack_ms, linesPerS]);
    const within = {
      p50_pct: Math.round(((batchAll.p50 - quietAll.p50) / quietAll.p50) * 1000) / 10,
      p99_pct: Math.round(((batchAll.p99 - quietAll.p99) / quietAll.p99) * 1000) / 10,
    };
    Object.assign(doc, {
      host: { cpus: os.cpus().length, node: process.version },
      phases: perPhase,
      pooled: { quiet: quietAll, with_batch: batchAll },
      file: { id: file.id, upload_ms: uploadMs },
      batches,
      alone,
      interactive_vs_quiet_pct: within,
      within_10_pct: within.p50_pct <= 10 && within.p99_pct <= 10,
      ledger,
      raw: Object.fromEntries(phases.map((p) => [p.label, p.result])),
      ...(timeline ? { timeline: timeline.rows } : {}),
    });
    const a = alone as { lines: number; failed: number; lines_per_s: number; cpu_ms_per_line: unknown };
    const out = [
      table(rowsOut),
      `interactive with a batch vs quiet, every measured request of ${rounds} rounds pooled: p50 ${within.p50_pct} %, p99 ${within.p99_pct} % (goal: within 10 %)`,
      `batch alone: ${a.lines} lines in ${aloneS} s = ${a.lines_per_s} lines/s (${a.failed} failed); CPU ms per line: ${JSON.stringify(a.cpu_ms_per_line)}`,
      `batches beside the interactive load: ${batches.map((b) => `${b.beside_lines} lines`).join(', ')} (${linesPerS} lines/s)`,
      `its tenant: ${batchLedger.debits} debits, balance = ledger ${batchLedger.balance_matches_ledger}, open holds ${batchLedger.open_holds}`,
      `ledger: ${JSON.stringify(ledger.map((r) => ({ debits: r.debits, open_holds: r.open_holds, balance_matches_ledger: r.balance_matches_ledger })))}`,
    ];
    const resultFile = join(ROOT, 'bench', 'results', `batch-interactive-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(resultFile, JSON.stringify(doc, null, 2) + '\n');
    out.push(`results: ${resultFile}`);
    process.stdout.write(out.join('\n\n') + '\n');
    return 0;
  } finally {
    await db.end();
    await timeline?.stop();
    await stack.stop();
  }
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
