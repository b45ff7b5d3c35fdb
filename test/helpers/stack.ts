import type { ChildProcess } from 'node:child_process';
import { launch } from '../../src/stack/launch.ts';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { connectBus } from '../../src/bus/connect.ts';
import { createPool } from '../../src/db/pool.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createApiKey, type CreateKeyInput } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { credit } from '../../src/billing/ledger.ts';
import { parseBrl } from '../../src/billing/money.ts';
import { ensureNats, freePort, type ServiceHandle } from '../../src/stack/services.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface Proc {
  name: string;
  child: ChildProcess;
  /** every line the process wrote, stdout and stderr */
  lines: string[];
  port?: number;
  exited: Promise<number | null>;
}

export interface StackOptions {
  gateways?: number;
  workers?: number;
  metering?: boolean;
  pools?: string;
  env?: Record<string, string>;
  /** Use the run's shared NATS_URL instead of a nats-server of this stack's own. */
  sharedNats?: boolean;
  /** Use this NATS (a cluster's URL list, a server with authentication) instead of a nats-server of this stack's own. */
  natsUrl?: string;
  /** A PostgreSQL of this stack's own (e.g. one the test kills); default: the run's DATABASE_URL. */
  databaseUrl?: string;
}

export interface TestStack {
  natsUrl: string;
  databaseUrl: string;
  /** Stops and restarts this stack's own nats-server on the same port and store (chaos tests). */
  restartNats(downMs?: number): Promise<void>;
  db: pg.Pool;
  nc: NatsConnection;
  gateways: Proc[];
  workers: Proc[];
  metering: Proc[];
  /** base URL of the first front door, ends in /v1 */
  baseUrl: string;
  urlOf(gateway: Proc): string;
  spawnGateway(env?: Record<string, string>): Promise<Proc>;
  spawnWorker(env?: Record<string, string>): Promise<Proc>;
  spawnMetering(env?: Record<string, string>): Promise<Proc>;
  /** A tenant with `balance` BRL and one key. */
  tenant(balance: string, key?: Omit<CreateKeyInput, 'tenantId'>): Promise<{ tenantId: string; keyId: string; key: string }>;
  /** Waits until these requests have ledger rows. */
  waitSettled(requestIds: string[], timeoutMs?: number): Promise<void>;
  /** Waits until the tenant has no open holds. */
  waitNoHolds(tenantId: string, timeoutMs?: number): Promise<void>;
  allLogLines(): string[];
  stop(): Promise<void>;
}

export const SIM_PRICES = {
  echo: { input: 1_000_000n, output: 2_000_000n }, // R$ 1,00 / R$ 2,00 per 1M tokens
  lorem: { input: 500_000n, output: 1_500_000n },
};

export async function seedSimCatalog(db: pg.Pool): Promise<void> {
  await upsertModel(db, {
    id: 'sim/echo',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: SIM_PRICES.echo.input,
    output_price: SIM_PRICES.echo.output,
    name: 'Sim Echo',
  });
  await upsertModel(db, {
    id: 'sim/lorem',
    pool: 'sim',
    upstream_model: 'lorem',
    input_price: SIM_PRICES.lorem.input,
    output_price: SIM_PRICES.lorem.output,
    name: 'Sim Lorem',
  });
}

function env(): { natsUrl: string; databaseUrl: string } {
  const natsUrl = process.env.NATS_URL;
  const databaseUrl = process.env.DATABASE_URL;
  if (!natsUrl || !databaseUrl) throw new Error('NATS_URL and DATABASE_URL must be set (test/global-setup.ts does it)');
  return { natsUrl, databaseUrl };
}

export async function spawnProcess(name: string, entry: string, extraEnv: Record<string, string>, ready: RegExp, timeoutMs = 45000): Promise<Proc> {
  const p = launch({ name, entry: join(ROOT, entry), cwd: ROOT, env: { LOG_LEVEL: 'info', ...extraEnv }, keepLines: true });
  const proc: Proc = { name, child: p.child, lines: p.lines, exited: p.exited };
  try {
    const line = await p.waitFor(ready, timeoutMs);
    const port = /"port":(\d+)/.exec(line);
    if (port) proc.port = Number(port[1]);
  } catch (err) {
    p.child.kill('SIGKILL');
    throw err;
  }
  return proc;
}

export async function stopProcess(proc: Proc, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 15000): Promise<number | null> {
  if (proc.child.exitCode !== null || proc.child.signalCode !== null) return proc.child.exitCode;
  proc.child.kill(signal);
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  return code;
}

export async function startStack(opts: StackOptions = {}): Promise<TestStack> {
  const shared = env();
  const databaseUrl = opts.databaseUrl ?? shared.databaseUrl;
  // Each stack gets its own nats-server: test files run in parallel, and a worker of one file must
  // never pick up another file's jobs.
  let nats: ServiceHandle | undefined;
  let natsUrl = shared.natsUrl;
  const natsDir = mkdtempSync(join(tmpdir(), 'catraca-nats-'));
  const natsPort = await freePort();
  if (opts.natsUrl) {
    natsUrl = opts.natsUrl;
  } else if (!opts.sharedNats) {
    nats = await ensureNats({ dataDir: natsDir, port: natsPort });
    natsUrl = nats.url;
  }
  await migrate(databaseUrl);
  const db = createPool(databaseUrl, 5);
  await seedSimCatalog(db);
  const nc = await connectBus(natsUrl, 'test-harness');
  const baseEnv = { NATS_URL: natsUrl, DATABASE_URL: databaseUrl, ...opts.env };
  const procs: Proc[] = [];
  const gateways: Proc[] = [];
  const workers: Proc[] = [];
  const meterings: Proc[] = [];

  const stack: TestStack = {
    natsUrl,
    databaseUrl,
    async restartNats(downMs = 500) {
      if (!nats) throw new Error('restartNats needs a stack-owned nats-server');
      await nats.stop();
      await new Promise((r) => setTimeout(r, downMs));
      nats = await ensureNats({ dataDir: natsDir, port: natsPort });
    },
    db,
    nc,
    gateways,
    workers,
    metering: meterings,
    get baseUrl() {
      return stack.urlOf(gateways[0]);
    },
    urlOf: (g) => `http://127.0.0.1:${g.port}/v1`,
    async spawnGateway(extra = {}) {
      const p = await spawnProcess(
        `gateway${gateways.length}`,
        'src/gateway/main.ts',
        { ...baseEnv, GATEWAY_HOST: '127.0.0.1', GATEWAY_PORT: '0', METRICS_PORT: '0', ...extra },
        /front door listening/,
      );
      gateways.push(p);
      procs.push(p);
      return p;
    },
    async spawnWorker(extra = {}) {
      const p = await spawnProcess(
        `worker${workers.length}`,
        'workers/main.ts',
        { ...baseEnv, WORKER_POOLS: opts.pools ?? 'sim,openai', ...extra },
        /worker (ready|started|listening)/i,
      );
      workers.push(p);
      procs.push(p);
      return p;
    },
    async spawnMetering(extra = {}) {
      const p = await spawnProcess(
        `metering${meterings.length}`,
        'src/metering/main.ts',
        { ...baseEnv, HOLD_SWEEP_INTERVAL_MS: '500', ...extra },
        /metering consumer running/,
      );
      meterings.push(p);
      procs.push(p);
      return p;
    },
    async tenant(balance, key = {}) {
      const t = await createTenant(db, `test-${Math.random().toString(36).slice(2, 8)}`);
      if (parseBrl(balance) > 0n) await credit(db, { tenantId: t.id, amountMicros: parseBrl(balance), source: 'grant', note: 'test' });
      const k = await createApiKey(db, { tenantId: t.id, label: 'test', ...key });
      return { tenantId: t.id, keyId: k.record.id, key: k.key };
    },
    async waitSettled(requestIds, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const { rows } = await db.query('select count(*)::int as n from ledger where request_id = any($1)', [requestIds]);
        if (rows[0].n === requestIds.length) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`requests not settled within ${timeoutMs} ms`);
    },
    async waitNoHolds(tenantId, timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const { rows } = await db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId]);
        if (rows[0].n === 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`holds of ${tenantId} still open after ${timeoutMs} ms`);
    },
    allLogLines: () => procs.flatMap((p) => p.lines),
    async stop() {
      await Promise.all(procs.map((p) => stopProcess(p)));
      await nc.drain().catch(() => {});
      await db.end().catch(() => {});
      await nats?.stop();
      rmSync(natsDir, { recursive: true, force: true });
    },
  };

  try {
    const g = opts.gateways ?? 1;
    const w = opts.workers ?? 1;
    await Promise.all([
      ...Array.from({ length: g }, () => stack.spawnGateway()),
      ...Array.from({ length: w }, () => stack.spawnWorker()),
      ...(opts.metering === false ? [] : [stack.spawnMetering()]),
    ]);
  } catch (err) {
    await stack.stop();
    throw err;
  }
  return stack;
}
