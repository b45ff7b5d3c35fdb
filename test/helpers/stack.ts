import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { type MockUpstream, type MockUpstreamOptions, startMockUpstream } from '../../bench/mock-upstream/server.ts';
import { connectBus } from '../../src/bus/connect.ts';
import { createPool } from '../../src/db/pool.ts';
import type { LoginRole } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createApiKey, type CreateKeyInput } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { credit } from '../../src/billing/ledger.ts';
import { parseBrl } from '../../src/billing/money.ts';
import { startOwnStack } from '../../src/stack/own-stack.ts';
import { readyPort, type ProcessName, type StartedProcess, type StartProcessOptions } from '../../src/stack/processes.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** A process of a test stack: every line it wrote is kept (stdout and stderr). */
export interface Proc extends StartedProcess {
  port?: number;
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
  /** How long a process may take to log its ready line (default 45 s). */
  readyTimeoutMs?: number;
}

export interface TestStack {
  natsUrl: string;
  /** The superuser's (seeding, checks); each process connects as its own role: roleUrl. */
  databaseUrl: string;
  roleUrl(role: LoginRole): string;
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
  /** The operator's console (src/console/), as its own process on 127.0.0.1 and a free port; `consoleUrl` then answers. */
  spawnConsole(env?: Record<string, string>): Promise<Proc>;
  consoles: Proc[];
  consoleUrl(console?: Proc): string;
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

export async function stopProcess(proc: Proc, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 15000): Promise<number | null> {
  return proc.stop(signal, timeoutMs);
}

export async function startStack(opts: StackOptions = {}): Promise<TestStack> {
  const shared = env();
  // Each stack gets its own nats-server unless told otherwise: test files run in parallel, and a
  // worker of one file must never pick up another file's jobs.
  const own = await startOwnStack({
    natsUrl: opts.natsUrl ?? (opts.sharedNats ? shared.natsUrl : undefined),
    databaseUrl: opts.databaseUrl ?? shared.databaseUrl,
    processDefaults: { root: ROOT, compiled: false, logLevel: 'info', keepLines: true, env: opts.env },
  });
  const { natsUrl, databaseUrl } = own;
  const db = createPool(databaseUrl, 5);
  own.onStop(() => db.end().catch(() => {}));
  let nc: NatsConnection;
  try {
    await seedSimCatalog(db);
    nc = await connectBus(natsUrl, 'test-harness');
  } catch (err) {
    await own.stop();
    throw err;
  }
  own.onStop(() => nc.drain().catch(() => {}));
  const gateways: Proc[] = [];
  const workers: Proc[] = [];
  const meterings: Proc[] = [];
  const consoles: Proc[] = [];
  const spawn = async (kind: ProcessName, list: Proc[], place: Partial<StartProcessOptions>): Promise<Proc> => {
    const p: Proc = own.start(kind, { name: `${kind}${list.length}`, ...place });
    p.port = readyPort(await p.ready(opts.readyTimeoutMs ?? 45000));
    list.push(p);
    return p;
  };

  const stack: TestStack = {
    natsUrl,
    databaseUrl,
    roleUrl: (role) => own.roleUrl(role),
    restartNats: (downMs) => own.restartNats(downMs),
    db,
    nc,
    gateways,
    workers,
    metering: meterings,
    get baseUrl() {
      return stack.urlOf(gateways[0]);
    },
    urlOf: (g) => `http://127.0.0.1:${g.port}/v1`,
    spawnGateway: (extra = {}) => spawn('gateway', gateways, { host: '127.0.0.1', port: 0, metricsPort: 0, env: extra }),
    spawnWorker: (extra = {}) => spawn('worker', workers, { pools: opts.pools ?? 'sim,openai', env: extra }),
    spawnMetering: (extra = {}) => spawn('metering', meterings, { env: { HOLD_SWEEP_INTERVAL_MS: '500', ...extra } }),
    // a console takes the dollar's rate from PTAX_URL: never the BCB's own service from a test
    // (a port nothing listens on: the rate stays unknown, as offline; test/fx starts a simulator)
    spawnConsole: (extra = {}) => spawn('console', consoles, { host: '127.0.0.1', port: 0, env: { PTAX_URL: 'http://127.0.0.1:9/ptax', ...extra } }),
    consoles,
    consoleUrl: (c = consoles[0]) => `http://127.0.0.1:${c.port}`,
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
    allLogLines: () => own.processes.flatMap((p) => p.lines),
    stop: () => own.stop(),
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

/**
 * A mock vendor (bench/mock-upstream, OpenAI's and Anthropic's wire formats) and a stack whose
 * workers may use its key: `MOCK_UPSTREAM_KEY`, the variable models name with `api_key_env`.
 */
export async function startStackWithVendor(
  upstreamKey: string,
  opts: StackOptions & { vendor?: MockUpstreamOptions } = {},
): Promise<{ stack: TestStack; mock: MockUpstream }> {
  const { vendor, ...stackOpts } = opts;
  const mock = await startMockUpstream({ host: '127.0.0.1', port: 0, ...vendor });
  try {
    const stack = await startStack({
      gateways: 1,
      workers: 1,
      ...stackOpts,
      env: { MOCK_UPSTREAM_KEY: upstreamKey, WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY', ...stackOpts.env },
    });
    return { stack, mock };
  } catch (err) {
    await mock.close();
    throw err;
  }
}
