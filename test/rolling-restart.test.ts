import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upsertModel } from '../src/db/models.ts';
import { startBalancer, type Balancer } from './helpers/balancer.ts';
import { cli } from './helpers/cli.ts';
import { type Proc, startStack, stopProcess, type TestStack } from './helpers/stack.ts';

// A rolling restart of every process of a stack while 500 streams are in flight, as
// `docker compose up -d` with a new image does it: each front door, then each worker, then
// metering, one at a time, gets SIGTERM and is replaced. The two front doors sit behind one
// address (a TCP balancer with health checks, test/helpers/balancer.ts), as an operator runs them.
// Counted exactly: streams cut 0, requests refused 0, and every request billed exactly once.

const STREAMS = 500;
const TOKENS = 16; // per stream, at 2 tokens/s: an 8 s stream
const PRICE = 1000n; // µBRL per output token (input free)
const TENANTS = 5;

let stack: TestStack;
let balancer: Balancer;
const replacements: { gateways: Proc[]; workers: Proc[]; metering?: Proc } = { gateways: [], workers: [] };

beforeAll(async () => {
  stack = await startStack({
    gateways: 1,
    workers: 1,
    env: { DRAIN_TIMEOUT_MS: '30000', DB_POOL_SIZE: '6', KEY_LOOKUP_CONCURRENCY: '2' },
    readyTimeoutMs: 120_000,
  });
  // then one at a time (processes compiling at once on a busy machine outlast the ready timeout):
  // the second front door and worker, and the replacements, started before the load — on a shared
  // 2-core machine a process's start under 500 streams can take longer than the test may. Each
  // replacement joins when its turn comes (a door enters the balancer; workers and metering take
  // work as soon as they run, as a new container does).
  await stack.spawnGateway();
  await stack.spawnWorker();
  for (let i = 0; i < 2; i++) replacements.gateways.push(await stack.spawnGateway());
  for (let i = 0; i < 2; i++) replacements.workers.push(await stack.spawnWorker());
  replacements.metering = await stack.spawnMetering();
  await upsertModel(stack.db, {
    id: 'drill/lorem',
    pool: 'sim',
    upstream_model: 'lorem',
    input_price: 0n,
    output_price: PRICE * 1_000_000n,
    max_output_tokens: 100,
  });
  balancer = await startBalancer(stack.gateways.slice(0, 2).map((g) => g.port!));
}, 400_000);

afterAll(async () => {
  if (process.env.ROLLING_DRILL_LOG) {
    const { writeFileSync } = await import('node:fs');
    writeFileSync(
      process.env.ROLLING_DRILL_LOG,
      stack
        .allLogLines()
        .filter((l) => /"level":"(warn|error)"|drain|shutting|stopp|exit/.test(l))
        .join('\n'),
    );
  }
  await balancer?.close();
  await stack?.stop();
});

interface Load {
  inFlight: number;
  /** requests sent again after their connection closed before any answer (as the SDKs do: nothing was read by the door) */
  retried: number;
  completed: string[];
  cut: Array<{ id: string | null; why: string; at?: number }>;
  refused: Array<{ status: number | null; body: string }>;
  stop(): Promise<void>;
}

function startLoad(url: string, keys: string[]): Load {
  let stopping = false;
  const load: Load = { inFlight: 0, retried: 0, completed: [], cut: [], refused: [], stop: async () => {} };
  const body = JSON.stringify({
    model: 'drill/lorem',
    stream: true,
    max_tokens: TOKENS,
    messages: [{ role: 'user', content: 'go' }],
    sim: { tokens_per_second: 2 },
  });
  const client = async (i: number) => {
    await new Promise((r) => setTimeout(r, (i * 1000) / STREAMS)); // 500 streams open within a second
    while (!stopping) {
      let res: Response | undefined;
      load.inFlight++;
      let attempt = 0;
      for (;;) {
        try {
          res = await fetch(`${url}/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${keys[i % keys.length]}`, 'content-type': 'application/json' },
            body,
          });
          break;
        } catch (err) {
          // a kept-alive connection the door closed as this request was sent (its stream ended
          // during the drain): the openai SDK retries such a connection error, and so do we
          if (attempt++ < 2) {
            load.retried++;
            continue;
          }
          res = undefined;
          load.refused.push({ status: null, body: String((err as Error).cause ?? err) });
          break;
        }
      }
      if (!res) {
        load.inFlight--;
        continue;
      }
      const id = res.headers.get('x-request-id');
      if (res.status !== 200) {
        load.inFlight--;
        load.refused.push({ status: res.status, body: await res.text().catch(() => '') });
        continue;
      }
      let text: string;
      try {
        text = await res.text();
      } catch (err) {
        load.inFlight--;
        load.cut.push({ id, why: String((err as Error).cause ?? err), at: Date.now() });
        continue;
      }
      load.inFlight--;
      const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
      const last = events.length >= 2 ? JSON.parse(events[events.length - 2].slice(6)) : null;
      const content = events
        .slice(0, -1)
        .map((e) => JSON.parse(e.slice(6)).choices?.[0]?.delta?.content ?? '')
        .join('');
      if (events.at(-1) !== 'data: [DONE]' || last?.choices?.[0]?.finish_reason !== 'length' || content.match(/\s*\S+/g)?.length !== TOKENS) {
        load.cut.push({ id, why: text.slice(-300) });
        continue;
      }
      load.completed.push(id!);
    }
  };
  const clients = Array.from({ length: STREAMS }, (_, i) => client(i));
  load.stop = async () => {
    stopping = true;
    await Promise.all(clients);
  };
  return load;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe('rolling restart under 500 streams', () => {
  it('front doors, workers and metering restarted one by one: no stream cut, no request refused, every request billed once', async () => {
    const tenants = await Promise.all(Array.from({ length: TENANTS }, () => stack.tenant('100.00')));
    const load = startLoad(
      balancer.url,
      tenants.map((t) => t.key),
    );
    await until(`${STREAMS} streams in flight`, () => load.inFlight >= STREAMS * 0.95, 60_000);
    const inFlightAtSigterm: Record<string, number> = {};
    const exits: Record<string, number | null> = {};
    const started = Date.now();

    // one process at a time: its replacement serving, then SIGTERM (it drains and exits)
    const phases: Record<string, number> = {};
    const sigterm = async (old: Proc, name: string) => {
      inFlightAtSigterm[name] = load.inFlight;
      phases[name] = Date.now();
      exits[name] = await stopProcess(old, 'SIGTERM', 60_000);
    };
    for (const [i, door] of stack.gateways.slice(0, 2).entries()) {
      const fresh = replacements.gateways[i];
      balancer.add(fresh.port!);
      await until('the new front door in the balancer', () => balancer.healthy().includes(fresh.port!), 10_000);
      await sigterm(door, `gateway${i}`);
      balancer.remove(door.port!);
    }
    for (const [i, worker] of stack.workers.slice(0, 2).entries()) await sigterm(worker, `worker${i}`);
    await sigterm(stack.metering[0], 'metering0');
    const restartMs = Date.now() - started;
    await sleep(2000); // the new processes serve too
    await load.stop();

    const requests = load.completed.length;
    // the figures docs/operations.md reports
    console.log(
      JSON.stringify({
        rolling_restart: {
          streams: STREAMS,
          in_flight_at_sigterm: inFlightAtSigterm,
          restart_ms: restartMs,
          requests,
          cut: load.cut.length,
          refused: load.refused.length,
          retried: load.retried,
          phases: Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, v - started])),
          cut_at: load.cut.map((c) => (c.at ?? 0) - started),
        },
      }),
    );
    expect(load.cut).toEqual([]);
    expect(load.refused).toEqual([]);
    expect(balancer.unrouted).toBe(0);
    expect(exits).toEqual({ gateway0: 0, gateway1: 0, worker0: 0, worker1: 0, metering0: 0 });
    expect(Math.min(...Object.values(inFlightAtSigterm))).toBeGreaterThanOrEqual(STREAMS * 0.9);
    expect(stack.allLogLines().filter((l) => /drain timed out|worker_shutting_down/.test(l))).toEqual([]);

    // every request billed exactly once: one ledger row per request id the clients saw, nothing else
    const tenantIds = tenants.map((t) => t.tenantId);
    const debits = async () =>
      (await stack.db.query(`select count(*)::int as n from ledger where kind = 'debit' and tenant_id = any($1)`, [tenantIds])).rows[0].n as number;
    await until('every request settled', async () => (await debits()) >= requests, 30_000);
    await sleep(500);
    const { rows } = await stack.db.query(
      `select request_id, count(*)::int as n, sum(amount_micros)::bigint as amount, min(outcome) as outcome
         from ledger where kind = 'debit' and tenant_id = any($1) group by request_id`,
      [tenantIds],
    );
    expect(rows.length).toBe(requests);
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(load.completed));
    expect(rows.filter((r) => r.n !== 1 || r.amount !== BigInt(TOKENS) * PRICE || r.outcome !== 'completed')).toEqual([]);
    const balances = await stack.db.query(
      `select t.id, t.balance_micros,
              (select coalesce(sum(case when kind = 'debit' then -amount_micros else amount_micros end), 0)::bigint from ledger l where l.tenant_id = t.id) as ledger
         from tenants t where t.id = any($1)`,
      [tenantIds],
    );
    const spent = balances.rows.reduce((n, r) => n + (100_000_000n - BigInt(r.balance_micros)), 0n);
    expect(spent).toBe(BigInt(requests) * BigInt(TOKENS) * PRICE);
    for (const r of balances.rows) expect(r.balance_micros).toBe(r.ledger);
    const check = await cli(['ledger', 'check', '--json'], { DATABASE_URL: stack.databaseUrl, NATS_URL: stack.natsUrl });
    expect(check.json).toMatchObject({ ok: true, mismatches: [] });
  }, 300_000);
});
