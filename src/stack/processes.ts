// What each catraca process is — its entry point (source and compiled), the line it logs once it
// serves, the environment it reads to join a stack, the PostgreSQL role it connects as (the one
// named after it: catraca_gateway, …) — and the one way to start one as a child,
// through launch(): `npm start`'s supervisor, the integration tests' stacks and the benchmarks.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type LoginRole, type RolePasswords, roleUrl } from '../db/roles.ts';
import { launch, type Launched, type LaunchSpec } from '../process/launch.ts';

export type ProcessName = 'gateway' | 'worker' | 'metering' | 'portal' | 'console';

export interface ProcessKind {
  /** How messages name it. */
  title: string;
  /** Entry point relative to the checkout: the TypeScript source (run through tsx)… */
  source: string;
  /** …and what `npm run build` makes of it (run with plain node). */
  compiled: string;
  /** The line it logs (at level info) once it serves. */
  ready: RegExp;
  /** Its own variables for the fields of a ProcessPlace: where it listens, which pools it serves. */
  vars: { host?: string; port?: string; pools?: string };
}

export const PROCESSES: Record<ProcessName, ProcessKind> = {
  gateway: {
    title: 'front door',
    source: 'src/gateway/main.ts',
    compiled: 'dist/src/gateway/main.js',
    ready: /front door listening/,
    vars: { host: 'GATEWAY_HOST', port: 'GATEWAY_PORT', pools: 'GATEWAY_LOCAL_POOLS' },
  },
  worker: { title: 'worker', source: 'workers/main.ts', compiled: 'dist/workers/main.js', ready: /worker ready/, vars: { pools: 'WORKER_POOLS' } },
  metering: { title: 'metering', source: 'src/metering/main.ts', compiled: 'dist/src/metering/main.js', ready: /metering consumer running/, vars: {} },
  portal: {
    title: 'portal',
    source: 'src/portal/main.ts',
    compiled: 'dist/src/portal/main.js',
    ready: /portal ready/,
    vars: { host: 'PORTAL_HOST', port: 'PORTAL_PORT' },
  },
  console: {
    title: "operator's console",
    source: 'src/console/main.ts',
    compiled: 'dist/src/console/main.js',
    ready: /console ready/,
    vars: { host: 'CONSOLE_HOST', port: 'CONSOLE_PORT' },
  },
};

/**
 * Whether this module runs compiled (dist/src/stack/processes.js, what `npm start` runs) or from
 * its TypeScript source (tests, tsx). By default children run the same way: compiled entries of
 * the build this file belongs to, or the sources of the checkout through tsx.
 */
export const COMPILED = import.meta.url.endsWith('.js');
/** When compiled: the directory holding dist/ (dist/src/stack/ → three levels up). */
const BUILT_IN = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The file a process runs: its source under `root`, or the compiled entry (of this build when this module is compiled, else of root/dist). */
export function entryFile(kind: ProcessName, root: string, compiled = COMPILED): string {
  const k = PROCESSES[kind];
  if (!compiled) return resolve(root, k.source);
  return join(COMPILED ? BUILT_IN : root, k.compiled);
}

/** Where a process sits in a stack: what it needs to join it (each field becomes its variable). */
export interface ProcessPlace {
  natsUrl?: string;
  databaseUrl?: string;
  /** Where a front door or the portal listens; port 0 = any free port (see readyPort). */
  host?: string;
  port?: number;
  /** A worker's WORKER_POOLS, a front door's GATEWAY_LOCAL_POOLS. */
  pools?: string;
  /** Its internal /metrics port (METRICS_PORT); 0 = any free port, null = not set. */
  metricsPort?: number | null;
  /** CATRACA_INSTANCE: its name on the bus and in its metrics. */
  instance?: string;
  logLevel?: string;
}

/**
 * The database URL each process connects with: its own role's (src/db/roles.ts), from the URL the
 * stack migrated with, for the roles whose password is known to be set (`ready`); the others keep
 * that URL as it is (`shared` names them).
 */
export function processDatabaseUrls(
  adminUrl: string,
  passwords: RolePasswords,
  ready: readonly LoginRole[],
): { urls: Record<ProcessName, string>; shared: ProcessName[] } {
  const kinds = Object.keys(PROCESSES) as ProcessName[];
  const shared = kinds.filter((k) => !ready.includes(k) || !passwords[k]);
  const urls = Object.fromEntries(kinds.map((k) => [k, shared.includes(k) ? adminUrl : roleUrl(adminUrl, k, passwords[k]!)])) as Record<ProcessName, string>;
  return { urls, shared };
}

/** The environment that puts a process of this kind at `place`. */
export function processEnv(kind: ProcessName, place: ProcessPlace): Record<string, string> {
  const { title, vars } = PROCESSES[kind];
  const env: Record<string, string> = {};
  const set = (field: string, name: string | undefined, value: string | number | null | undefined) => {
    if (value === undefined || value === null) return;
    if (!name) throw new Error(`the ${title} has no ${field}`);
    env[name] = String(value);
  };
  set('NATS', 'NATS_URL', place.natsUrl);
  set('PostgreSQL', 'DATABASE_URL', place.databaseUrl);
  set('host', vars.host, place.host);
  set('port', vars.port, place.port);
  set('pools', vars.pools, place.pools);
  set('metrics port', 'METRICS_PORT', place.metricsPort);
  set('instance', 'CATRACA_INSTANCE', place.instance);
  set('log level', 'LOG_LEVEL', place.logLevel);
  return env;
}

export interface StartProcessOptions extends ProcessPlace, Pick<LaunchSpec, 'nodeFlags' | 'onLine' | 'keepLines' | 'logFile' | 'detached'> {
  /** The checkout: the child's working directory and where the sources are. */
  root: string;
  /** Run the compiled entry with plain node rather than the source through tsx (default: as this module runs). */
  compiled?: boolean;
  /** This instance's name in messages (default: the kind). */
  name?: string;
  /** More environment, over what the place gives. */
  env?: Record<string, string | undefined>;
  /** Profile it: node --cpu-prof, the profile written into this directory when it exits. */
  cpuProfDir?: string;
}

export interface StartedProcess extends Launched {
  kind: ProcessName;
  /** Resolves with its ready line; if it exits first or takes longer than `timeoutMs`, it is killed and this rejects. */
  ready(timeoutMs?: number): Promise<string>;
}

export function startProcess(kind: ProcessName, opts: StartProcessOptions): StartedProcess {
  const launched = launch({
    name: opts.name ?? kind,
    entry: entryFile(kind, opts.root, opts.compiled),
    cwd: opts.root,
    env: { ...processEnv(kind, opts), ...opts.env },
    nodeFlags: [...(opts.nodeFlags ?? []), ...(opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : [])],
    onLine: opts.onLine,
    keepLines: opts.keepLines,
    logFile: opts.logFile,
    detached: opts.detached,
  });
  const ready = async (timeoutMs?: number) => {
    try {
      return await launched.waitFor(PROCESSES[kind].ready, timeoutMs);
    } catch (err) {
      launched.child.kill('SIGKILL');
      throw err;
    }
  };
  return Object.assign(launched, { kind, ready });
}

/** The port a process listens on, from its (JSON) ready line: what port 0 turned into. */
export function readyPort(line: string): number | undefined {
  const m = /"port":(\d+)/.exec(line);
  return m ? Number(m[1]) : undefined;
}
