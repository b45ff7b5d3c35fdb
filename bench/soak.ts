import http from 'node:http';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { NatsConnection } from 'nats';
import { connectBus } from '../src/bus/connect.ts';
import { createPool, type Db } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';
import { createApiKey, type CreateKeyInput } from '../src/db/keys.ts';
import { upsertModel } from '../src/db/models.ts';
import { credit } from '../src/billing/ledger.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { collectInstances } from '../src/bus/instances.ts';
import type { OwnStack } from '../src/stack/own-stack.ts';
import { freePort } from '../src/stack/services.ts';
import { readCpuSeconds, ROOT, startBenchProcesses, startBenchStack } from './procs.ts';
import { lineChart } from './svg.ts';

// Soak: a mixed load held for a long time against a whole stack of real processes, sampling what
// would show a leak or a drift: RSS and CPU of every process (/proc), event-loop lag of every
// catraca process ($SRV.STATS), open holds and leases (PostgreSQL), NATS subscriptions
// (nats-server monitoring, /subsz and /connz), the front door's open streams. At the end: every
// request answered 200 has exactly one debit, no hold is left, `catraca ledger check` passes,
// and the subscriptions are back to where they were before the load.
//
//   npx tsx bench/soak.ts [--duration 10m] [--rate 60] [--sample 5s] [--database-url URL]
//
// The load (open loop, `--rate` requests/s, a seeded mix):
//   stream      45 %  sim/lorem streamed, 20 tokens at 100 tokens/s      tenants A (leased) and B (per-request holds)
//   plain       25 %  sim/echo, not streamed                              A and B
//   disconnect  10 %  sim/lorem streamed, 200 tokens at 50/s; the client leaves after the first token  A
//   slow         5 %  sim/lorem streamed, 3 000 tokens at once, read at ~20 KB/s (at most 3 at a time)  B
//   poor        15 %  soak/pricey on tenant C, whose balance covers a few dozen requests: 402s, topped up every 15 s
// NATS: a nats-server of the soak's own with monitoring (-m). PostgreSQL: --database-url or
// DATABASE_URL when given (migrated), else an embedded one of the soak's own (then its processes
// are measured too).

export interface SoakOptions {
  durationMs: number;
  rate: number;
  sampleMs?: number;
  databaseUrl?: string;
  /** where the JSON result goes (default bench/results); null: not written */
  resultsDir?: string | null;
  /** where the SVG plots go (default bench/results/plots); null: none */
  plotsDir?: string | null;
  seed?: number;
  /** tokens of a slow reader's answer (default 3 000, ~35 s at 20 KB/s) */
  slowTokens?: number;
  log?: (line: string) => void;
}

interface Sample {
  t_s: number;
  rss_mib: Record<string, number | null>;
  cpu_pct: Record<string, number | null>;
  event_loop_p99_ms: Record<string, number | null>;
  holds: { request: number; lease: number };
  nats_subscriptions: number | null;
  subs_by_connection: Record<string, number>;
  gateway: { inflight: number | null; open_streams: number | null; leases_open: number | null };
  client_inflight: number;
  sent: number;
}

type Kind = 'stream' | 'plain' | 'disconnect' | 'slow' | 'poor';

export interface SoakResult {
  started_at: string;
  options: { duration_s: number; rate: number; sample_s: number; seed: number };
  sent: number;
  by_kind: Record<Kind, { sent: number; by_status: Record<string, number>; p50_ms: number | null; p99_ms: number | null }>;
  by_status: Record<string, number>;
  client_errors: Record<string, number>;
  server_5xx: number;
  debited_expected: number;
  debits: number;
  missing_debits: number;
  unexpected_debits: number;
  holds_end: { request: number; lease: number };
  nats_subscriptions: { baseline: number | null; max: number | null; end: number | null };
  rss_mib: Record<string, { start: number | null; end: number | null; max: number | null }>;
  /** RSS growth in the second half of the load (least-squares slope of its samples), MiB a minute: a leak shows here, the first half's warm-up does not */
  rss_mib_per_min_second_half: Record<string, number | null>;
  cpu_pct_mean: Record<string, number | null>;
  event_loop_p99_ms: Record<string, { p50: number | null; p99: number | null; max: number | null }>;
  ledger_check: { ok: boolean; tenants_checked: number; mismatches: unknown[] };
  top_ups: number;
  samples: Sample[];
  files: { json: string | null; plots: string[] };
}

// ------------------------------------------------------------------------------ measurements
function readRssKiB(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** The pids of a process and its children (a postmaster and its backends). */
function treePids(root: number): number[] {
  const out = [root];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === root) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

const quantile = (xs: number[], q: number): number | null => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
};
const round1 = (v: number | null) => (v === null ? null : Math.round(v * 10) / 10);

/** Least-squares slope of (x, y) points; null for fewer than 2 distinct x. */
export function slope(points: Array<[number, number]>): number | null {
  if (points.length < 2) return null;
  const mx = points.reduce((a, [x]) => a + x, 0) / points.length;
  const my = points.reduce((a, [, y]) => a + y, 0) / points.length;
  const sxx = points.reduce((a, [x]) => a + (x - mx) ** 2, 0);
  return sxx === 0 ? null : points.reduce((a, [x, y]) => a + (x - mx) * (y - my), 0) / sxx;
}

/** mulberry32: a small seeded PRNG, so a run's mix can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function natsMonitor(port: number): Promise<{ total: number | null; byConnection: Record<string, number> }> {
  try {
    const subsz = (await (await fetch(`http://127.0.0.1:${port}/subsz`)).json()) as { num_subscriptions: number };
    const connz = (await (await fetch(`http://127.0.0.1:${port}/connz?subs=1&limit=1024`)).json()) as {
      connections?: Array<{ name?: string; subscriptions: number }>;
    };
    const byConnection: Record<string, number> = {};
    for (const c of connz.connections ?? []) {
      // "catraca-gateway bench-gateway", "worker <id> [sim]", "soak-bench": group by the first word
      const name = (c.name ?? '?').split(' ')[0]!;
      byConnection[name] = (byConnection[name] ?? 0) + c.subscriptions;
    }
    return { total: subsz.num_subscriptions, byConnection };
  } catch {
    return { total: null, byConnection: {} };
  }
}

// ------------------------------------------------------------------------------ the client
interface Outcome {
  status: number;
  requestId: string | null;
  ms: number;
  error?: string;
}

function chat(agent: http.Agent, port: number, key: string, body: unknown, mode: 'full' | 'leave' | 'slow'): Promise<Outcome> {
  const started = performance.now();
  const payload = JSON.stringify(body);
  return new Promise((resolve) => {
    let done = false;
    const finish = (o: Omit<Outcome, 'ms'>) => {
      if (done) return;
      done = true;
      resolve({ ...o, ms: performance.now() - started });
    };
    const req = http.request(
      {
        agent,
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const requestId = (res.headers['x-request-id'] as string | undefined) ?? null;
        if (mode === 'leave' && status === 200) {
          res.on('data', (c: Buffer) => {
            if (c.includes('"content":"') && !c.includes('"content":""')) {
              req.destroy();
              finish({ status, requestId });
            }
          });
          res.on('end', () => finish({ status, requestId }));
          res.on('error', () => finish({ status, requestId }));
          return;
        }
        if (mode === 'slow' && status === 200) {
          // ~20 KB/s: one chunk at a time, the next read after chunk.length / 20 ms
          res.pause();
          const pump = () => {
            const c = res.read() as Buffer | null;
            if (c === null) return void res.once('readable', pump);
            setTimeout(pump, Math.max(5, c.length / 20));
          };
          res.once('readable', pump);
          res.on('end', () => finish({ status, requestId }));
          res.on('close', () => finish({ status, requestId }));
          res.on('error', () => finish({ status, requestId }));
          return;
        }
        res.on('data', () => {});
        res.on('end', () => finish({ status, requestId }));
        res.on('error', (e) => finish({ status, requestId, error: e.message }));
      },
    );
    req.on('error', (e) => finish({ status: 0, requestId: null, error: (e as NodeJS.ErrnoException).code ?? e.message }));
    req.setTimeout(120_000, () => req.destroy(new Error('client timeout')));
    req.end(payload);
  });
}

const WORDS = 'o rato roeu a roupa do rei de roma e a rainha com raiva resolveu remendar catraca gira conta cobra'.split(' ');

// ------------------------------------------------------------------------------ the run
export async function runSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log ?? ((l: string) => process.stdout.write(l + '\n'));
  const sampleMs = o.sampleMs ?? 5000;
  const seed = o.seed ?? 20260520;
  const random = rng(seed);
  let stack: OwnStack | undefined;
  let db: Db | undefined;
  let nc: NatsConnection | undefined;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });
  try {
    // ---- services and processes
    const monitorPort = await freePort();
    stack = await startBenchStack({
      databaseUrl: o.databaseUrl,
      database: 'catraca_soak',
      tmpPrefix: 'catraca-soak-',
      natsArgs: ['-m', String(monitorPort)],
      natsLog: 'soak-nats-server',
    });
    const { nats, postmasterPid } = stack;
    db = createPool(stack.databaseUrl, 4);
    stack.onStop(() => db!.end().catch(() => {}));
    await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n, name: 'Sim Echo' });
    await upsertModel(db, { id: 'sim/lorem', pool: 'sim', upstream_model: 'lorem', input_price: 500_000n, output_price: 1_500_000n, name: 'Sim Lorem' });
    // R$ 100 / R$ 1 000 per 1M tokens: one request of tenant C costs about R$ 0,01
    await upsertModel(db, {
      id: 'soak/pricey',
      pool: 'sim',
      upstream_model: 'echo',
      input_price: 100_000_000n,
      output_price: 1_000_000_000n,
      name: 'Soak pricey',
    });
    const stamp = new Date().toISOString();
    const mk = async (name: string, brl: bigint, key: Omit<CreateKeyInput, 'tenantId'>) => {
      const t = await createTenant(db!, `soak ${name} ${stamp}`);
      await credit(db!, { tenantId: t.id, amountMicros: brl, source: 'grant', note: 'soak' });
      const k = await createApiKey(db!, { tenantId: t.id, label: `soak ${name}`, ...key });
      return { id: t.id, key: k.key };
    };
    const A = await mk('A', 1_000_000_000n, {});
    const B = await mk('B', 1_000_000_000n, { rateLimitRequests: 1_000_000, rateLimitIntervalS: 1 });
    // R$ 0,50 (about 50 requests) for a run of 30 s or more; less for a shorter run, so it still runs out
    const C = await mk('C', BigInt(Math.round(500_000 * Math.min(1, o.durationMs / 30_000))), {});
    const tenants = [A.id, B.id, C.id];

    const { procs, gatewayUrls } = await startBenchProcesses(stack, {
      namePrefix: 'soak-',
      instancePrefix: 'soak-',
      workers: 1,
      workerPools: 'sim',
      gateways: 1,
    });
    const [metering, worker, gateway] = procs;
    const gatewayPort = Number(new URL(gatewayUrls[0]!).port);
    nc = await connectBus(stack.natsUrl, 'soak-bench');
    stack.onStop(() => nc!.drain().catch(() => {}));
    const measured: Array<{ name: string; pids: () => number[] }> = [
      { name: 'gateway', pids: () => [gateway.pid] },
      { name: 'worker', pids: () => [worker.pid] },
      { name: 'metering', pids: () => [metering.pid] },
      { name: 'nats-server', pids: () => (nats!.pid ? [nats!.pid] : []) },
      ...(postmasterPid ? [{ name: 'postgres', pids: () => treePids(postmasterPid!) }] : []),
    ];
    log(
      `soak: stack up (gateway :${gatewayPort}, nats monitoring :${monitorPort}, ${postmasterPid ? 'own PostgreSQL' : 'given PostgreSQL'}); ${o.rate} req/s for ${o.durationMs / 1000} s`,
    );

    // warm-up: one of each, so every lazy subscription exists before the baseline
    const warmIds: string[] = [];
    for (const k of [A, B]) {
      const w = await chat(agent, gatewayPort, k.key, { model: 'sim/echo', messages: [{ role: 'user', content: 'warm up' }], max_tokens: 4 }, 'full');
      if (w.status !== 200 || !w.requestId) throw new Error(`warm-up request answered ${w.status}`);
      warmIds.push(w.requestId);
    }
    // the bench's own request inbox (nats.js creates it on the first request) exists before the baseline too
    await collectInstances(nc, { waitMs: 800 }).catch(() => []);
    await new Promise((r) => setTimeout(r, 500));
    const baseline = await natsMonitor(monitorPort);

    // ---- sampling
    const samples: Sample[] = [];
    const t0 = Date.now();
    // CPU per pid: a PostgreSQL backend that exits between two samples takes its CPU seconds with
    // it, so a tree's share is the sum of each live pid's growth (a new pid counts from zero)
    let lastCpu = new Map<number, number>();
    let lastAt = 0;
    let sent = 0;
    let clientInflight = 0;
    const holdCounts = async () => {
      const { rows } = await db!.query('select kind, count(*)::int as n from holds where tenant_id = any($1) group by kind', [tenants]);
      const out = { request: 0, lease: 0 };
      for (const r of rows) out[r.kind as 'request' | 'lease'] = r.n;
      return out;
    };
    const takeSample = async (): Promise<Sample> => {
      const now = Date.now();
      const rss: Record<string, number | null> = {};
      const cpu: Record<string, number | null> = {};
      const nextCpu = new Map<number, number>();
      for (const m of measured) {
        const pids = m.pids();
        const kib = pids.map(readRssKiB).filter((v): v is number => v !== null);
        rss[m.name] = kib.length ? round1(kib.reduce((a, b) => a + b, 0) / 1024) : null;
        let grew = 0;
        for (const pid of pids) {
          const secs = readCpuSeconds(pid);
          if (secs === null) continue;
          nextCpu.set(pid, secs);
          grew += Math.max(0, secs - (lastCpu.get(pid) ?? 0));
        }
        cpu[m.name] = lastAt ? round1((grew / ((now - lastAt) / 1000)) * 100) : null;
      }
      lastCpu = nextCpu;
      lastAt = now;
      const subs = await natsMonitor(monitorPort);
      const lag: Record<string, number | null> = {};
      const gw = { inflight: null as number | null, open_streams: null as number | null, leases_open: null as number | null };
      try {
        for (const row of await collectInstances(nc!, { waitMs: 800 })) {
          const name = row.service.replace(/^catraca-/, '');
          lag[name] = row.event_loop_p99_ms;
          if (name === 'gateway') {
            gw.inflight = row.inflight;
            gw.open_streams = row.gauges['catraca_open_streams'] ?? null;
            gw.leases_open = row.gauges['catraca_leases_open'] ?? null;
          }
        }
      } catch {
        // no answer this time
      }
      return {
        t_s: Math.round((now - t0) / 100) / 10,
        rss_mib: rss,
        cpu_pct: cpu,
        event_loop_p99_ms: lag,
        holds: await holdCounts(),
        nats_subscriptions: subs.total,
        subs_by_connection: subs.byConnection,
        gateway: gw,
        client_inflight: clientInflight,
        sent,
      };
    };
    samples.push(await takeSample());
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        await new Promise((r) => setTimeout(r, sampleMs));
        if (!sampling) break;
        const s = await takeSample();
        samples.push(s);
        log(
          `t=${s.t_s}s sent=${s.sent} inflight=${s.client_inflight} rss gw=${s.rss_mib.gateway} wk=${s.rss_mib.worker} mt=${s.rss_mib.metering} nats=${s.rss_mib['nats-server']} MiB; lag p99 gw=${s.event_loop_p99_ms.gateway} ms; holds ${s.holds.request}+${s.holds.lease} leases; subs ${s.nats_subscriptions}`,
        );
      }
    })();

    // ---- tenant C's top-ups
    let topUps = 0;
    const topUp = setInterval(() => {
      topUps++;
      void credit(db!, { tenantId: C.id, amountMicros: 300_000n, source: 'grant', note: 'soak top-up' }).catch((err) => log(`top-up failed: ${err}`));
    }, 15000);

    // ---- the load
    const kinds: Kind[] = ['stream', 'plain', 'disconnect', 'slow', 'poor'];
    const byKind = Object.fromEntries(kinds.map((k) => [k, { sent: 0, by_status: {} as Record<string, number>, ms: [] as number[] }])) as Record<
      Kind,
      { sent: number; by_status: Record<string, number>; ms: number[] }
    >;
    const byStatus: Record<string, number> = {};
    const clientErrors: Record<string, number> = {};
    const debitedIds = new Set<string>(warmIds);
    const inflight = new Set<Promise<void>>();
    let slowNow = 0;
    const words = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
    const one = (i: number) => {
      const r = random();
      let kind: Kind = r < 0.45 ? 'stream' : r < 0.7 ? 'plain' : r < 0.8 ? 'disconnect' : r < 0.85 ? 'slow' : 'poor';
      if (kind === 'slow' && slowNow >= 3) kind = 'stream';
      const tenant = kind === 'poor' ? C : kind === 'disconnect' ? A : kind === 'slow' ? B : i % 2 ? A : B;
      let body: Record<string, unknown>;
      let mode: 'full' | 'leave' | 'slow' = 'full';
      if (kind === 'stream')
        body = {
          model: 'sim/lorem',
          stream: true,
          stream_options: { include_usage: true },
          max_tokens: 64,
          sim: { output_tokens: 20, tokens_per_second: 100, first_token_ms: 20 },
          messages: [{ role: 'user', content: words(8) }],
        };
      else if (kind === 'plain')
        body = {
          model: 'sim/echo',
          max_tokens: 64,
          messages: [
            { role: 'system', content: 'eco' },
            { role: 'user', content: words(5 + Math.floor(random() * 25)) },
          ],
        };
      else if (kind === 'disconnect') {
        body = {
          model: 'sim/lorem',
          stream: true,
          max_tokens: 256,
          sim: { output_tokens: 200, tokens_per_second: 50, first_token_ms: 10 },
          messages: [{ role: 'user', content: words(6) }],
        };
        mode = 'leave';
      } else if (kind === 'slow') {
        const n = o.slowTokens ?? 3000;
        body = {
          model: 'sim/lorem',
          stream: true,
          max_tokens: n,
          sim: { output_tokens: n, tokens_per_second: 0, first_token_ms: 0 },
          messages: [{ role: 'user', content: words(6) }],
        };
        mode = 'slow';
        slowNow++;
      } else body = { model: 'soak/pricey', stream: random() < 0.5, max_tokens: 20, messages: [{ role: 'user', content: words(10) }] };
      byKind[kind].sent++;
      sent++;
      clientInflight++;
      const p = chat(agent, gatewayPort, tenant.key, body, mode).then((out) => {
        clientInflight--;
        if (kind === 'slow') slowNow--;
        const st = String(out.status);
        byStatus[st] = (byStatus[st] ?? 0) + 1;
        byKind[kind].by_status[st] = (byKind[kind].by_status[st] ?? 0) + 1;
        byKind[kind].ms.push(out.ms);
        if (out.error) clientErrors[out.error] = (clientErrors[out.error] ?? 0) + 1;
        if (out.status === 200 && out.requestId) debitedIds.add(out.requestId);
      });
      inflight.add(p);
      void p.finally(() => inflight.delete(p));
    };
    const interval = 1000 / o.rate;
    const loadStart = performance.now();
    for (let i = 0; ; i++) {
      const due = loadStart + i * interval;
      if (due - loadStart >= o.durationMs) break;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      one(i);
    }
    log(`soak: load done (${sent} sent); waiting for ${inflight.size} in flight`);
    clearInterval(topUp);
    const drainDeadline = Date.now() + 90_000;
    while (inflight.size > 0 && Date.now() < drainDeadline) await Promise.race([...inflight, new Promise((r) => setTimeout(r, 1000))]);
    agent.destroy();

    // ---- settle: every 200 debited once, no hold left
    const countDebits = async () =>
      (await db!.query("select request_id from ledger where tenant_id = any($1) and kind = 'debit' and source = 'request'", [tenants])).rows.map(
        (r) => r.request_id as string,
      );
    let debits = await countDebits();
    const settleDeadline = Date.now() + 60_000;
    while (Date.now() < settleDeadline) {
      debits = await countDebits();
      const h = await holdCounts();
      if (debits.length >= debitedIds.size && h.request === 0 && h.lease === 0) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    sampling = false;
    await sampler;
    samples.push(await takeSample());
    const end = samples[samples.length - 1]!;
    const debitSet = new Set(debits);
    const missing = [...debitedIds].filter((id) => !debitSet.has(id)).length;
    const unexpected = debits.filter((id) => !debitedIds.has(id)).length;
    const checks = await Promise.all(tenants.map((t) => ledgerCheck(db!, { tenantId: t })));
    const ledger = {
      ok: checks.every((c) => c.ok),
      tenants_checked: checks.reduce((a, c) => a + c.tenants_checked, 0),
      mismatches: checks.flatMap((c) => c.mismatches),
    };

    const names = measured.map((m) => m.name);
    const lagNames = [...new Set(samples.flatMap((s) => Object.keys(s.event_loop_p99_ms)))];
    const during = samples.slice(1, -1); // under load
    const result: SoakResult = {
      started_at: new Date(t0).toISOString(),
      options: { duration_s: o.durationMs / 1000, rate: o.rate, sample_s: sampleMs / 1000, seed },
      sent,
      by_kind: Object.fromEntries(
        kinds.map((k) => [
          k,
          { sent: byKind[k].sent, by_status: byKind[k].by_status, p50_ms: round1(quantile(byKind[k].ms, 0.5)), p99_ms: round1(quantile(byKind[k].ms, 0.99)) },
        ]),
      ) as SoakResult['by_kind'],
      by_status: byStatus,
      client_errors: clientErrors,
      server_5xx: Object.entries(byStatus)
        .filter(([s]) => Number(s) >= 500)
        .reduce((a, [, n]) => a + n, 0),
      debited_expected: debitedIds.size,
      debits: debits.length,
      missing_debits: missing,
      unexpected_debits: unexpected,
      holds_end: end.holds,
      nats_subscriptions: {
        baseline: baseline.total,
        max: samples.reduce<number | null>((m, s) => (s.nats_subscriptions === null ? m : Math.max(m ?? 0, s.nats_subscriptions)), null),
        end: end.nats_subscriptions,
      },
      rss_mib: Object.fromEntries(
        names.map((n) => [
          n,
          {
            start: samples[0]!.rss_mib[n] ?? null,
            end: end.rss_mib[n] ?? null,
            max: samples.reduce<number | null>((m, s) => (s.rss_mib[n] == null ? m : Math.max(m ?? 0, s.rss_mib[n]!)), null),
          },
        ]),
      ),
      rss_mib_per_min_second_half: Object.fromEntries(
        names.map((n) => {
          const [from, to] = [o.durationMs / 2000, o.durationMs / 1000];
          const pts = samples.filter((s) => s.t_s >= from && s.t_s <= to && s.rss_mib[n] != null).map((s) => [s.t_s / 60, s.rss_mib[n]!] as [number, number]);
          const b = slope(pts);
          return [n, b === null ? null : Math.round(b * 100) / 100];
        }),
      ),
      cpu_pct_mean: Object.fromEntries(
        names.map((n) => {
          const xs = during.map((s) => s.cpu_pct[n]).filter((v): v is number => v != null);
          return [n, xs.length ? round1(xs.reduce((a, b) => a + b, 0) / xs.length) : null];
        }),
      ),
      event_loop_p99_ms: Object.fromEntries(
        lagNames.map((n) => {
          const xs = during.map((s) => s.event_loop_p99_ms[n]).filter((v): v is number => v != null);
          return [n, { p50: quantile(xs, 0.5), p99: quantile(xs, 0.99), max: xs.length ? Math.max(...xs) : null }];
        }),
      ),
      ledger_check: ledger,
      top_ups: topUps,
      samples,
      files: { json: null, plots: [] },
    };

    // ---- files
    if (o.plotsDir !== null) {
      const dir = o.plotsDir ?? join(ROOT, 'bench', 'results', 'plots');
      mkdirSync(dir, { recursive: true });
      const x = (s: Sample) => s.t_s / 60;
      const charts: Array<[string, Parameters<typeof lineChart>[0]]> = [
        [
          'soak-rss.svg',
          {
            title: `RSS per process (${o.rate} req/s, ${o.durationMs / 60000} min)`,
            xLabel: 'minutes',
            yLabel: 'MiB',
            series: names.map((n) => ({ name: n, points: samples.map((s) => [x(s), s.rss_mib[n] ?? NaN] as [number, number]) })),
          },
        ],
        [
          'soak-lag.svg',
          {
            title: 'Event-loop delay p99 (10 s windows, $SRV.STATS)',
            xLabel: 'minutes',
            yLabel: 'ms',
            series: lagNames.map((n) => ({ name: n, points: samples.map((s) => [x(s), s.event_loop_p99_ms[n] ?? NaN] as [number, number]) })),
          },
        ],
        [
          'soak-holds.svg',
          {
            title: 'Open holds and leases of the soak tenants',
            xLabel: 'minutes',
            yLabel: 'rows in holds',
            series: [
              { name: 'request holds', points: samples.map((s) => [x(s), s.holds.request]) },
              { name: 'leases', points: samples.map((s) => [x(s), s.holds.lease]) },
              { name: 'client in flight', points: samples.map((s) => [x(s), s.client_inflight]) },
            ],
          },
        ],
        [
          'soak-subs.svg',
          {
            title: 'NATS subscriptions (nats-server /subsz, /connz)',
            xLabel: 'minutes',
            yLabel: 'subscriptions',
            series: [
              { name: 'total', points: samples.map((s) => [x(s), s.nats_subscriptions ?? NaN]) },
              ...[...new Set(samples.flatMap((s) => Object.keys(s.subs_by_connection)))].map((c) => ({
                name: c,
                points: samples.map((s) => [x(s), s.subs_by_connection[c] ?? 0] as [number, number]),
              })),
            ],
          },
        ],
        [
          'soak-cpu.svg',
          {
            title: 'CPU per process (% of one core)',
            xLabel: 'minutes',
            yLabel: '%',
            series: names.map((n) => ({ name: n, points: samples.map((s) => [x(s), s.cpu_pct[n] ?? NaN] as [number, number]) })),
          },
        ],
      ];
      for (const [file, chart] of charts) {
        writeFileSync(join(dir, file), lineChart(chart));
        result.files.plots.push(join(dir, file));
      }
    }
    if (o.resultsDir !== null) {
      const dir = o.resultsDir ?? join(ROOT, 'bench', 'results');
      mkdirSync(dir, { recursive: true });
      const file = join(dir, `soak-${new Date(t0).toISOString().replace(/[:.]/g, '-')}.json`);
      result.files.json = file;
      writeFileSync(file, JSON.stringify(result, null, 2));
    }
    return result;
  } finally {
    agent.destroy();
    await stack?.stop();
  }
}

/** "10m", "90s", "1h", "600" (seconds) → ms */
export function parseDuration(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(s.trim());
  if (!m) throw new Error(`not a duration: ${s}`);
  const n = Number(m[1]);
  return Math.round(n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h']);
}

export function summarize(r: SoakResult): string {
  const lines = [
    `soak ${r.options.duration_s} s at ${r.options.rate} req/s: ${r.sent} requests; by status ${JSON.stringify(r.by_status)}; 5xx ${r.server_5xx}; client errors ${JSON.stringify(r.client_errors)}`,
    `debits ${r.debits} for ${r.debited_expected} answered 200 (missing ${r.missing_debits}, unexpected ${r.unexpected_debits}); holds at end ${JSON.stringify(r.holds_end)}; ledger check ${r.ledger_check.ok ? 'ok' : 'FAILED'} (${r.ledger_check.tenants_checked} tenants)`,
    `NATS subscriptions: baseline ${r.nats_subscriptions.baseline}, max ${r.nats_subscriptions.max}, end ${r.nats_subscriptions.end}`,
    ...Object.entries(r.rss_mib).map(
      ([n, v]) =>
        `RSS ${n}: start ${v.start} MiB, end ${v.end} MiB, max ${v.max} MiB, ${r.rss_mib_per_min_second_half[n]} MiB/min in the second half; CPU mean ${r.cpu_pct_mean[n]} %`,
    ),
    ...Object.entries(r.event_loop_p99_ms).map(([n, v]) => `event-loop p99 ${n}: median ${v.p50} ms, p99 ${v.p99} ms, max ${v.max} ms`),
    ...Object.entries(r.by_kind).map(([k, v]) => `${k}: ${v.sent} sent, ${JSON.stringify(v.by_status)}, p50 ${v.p50_ms} ms, p99 ${v.p99_ms} ms`),
    ...(r.files.json ? [`result: ${r.files.json}`] : []),
    ...r.files.plots.map((p) => `plot: ${p}`),
  ];
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string', default: '10m' },
      rate: { type: 'string', default: '60' },
      sample: { type: 'string', default: '5s' },
      'database-url': { type: 'string' },
      seed: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (v.help) {
    process.stdout.write('usage: npx tsx bench/soak.ts [--duration 10m] [--rate 60] [--sample 5s] [--database-url URL] [--seed N]\n');
    return 0;
  }
  const r = await runSoak({
    durationMs: parseDuration(v.duration!),
    rate: Number(v.rate),
    sampleMs: parseDuration(v.sample!),
    databaseUrl: v['database-url'] ?? process.env.DATABASE_URL,
    seed: v.seed ? Number(v.seed) : undefined,
  });
  process.stdout.write(summarize(r) + '\n');
  const ok =
    r.server_5xx === 0 && r.missing_debits === 0 && r.unexpected_debits === 0 && r.holds_end.request === 0 && r.holds_end.lease === 0 && r.ledger_check.ok;
  return ok ? 0 : 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
