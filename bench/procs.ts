import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { launch, type Launched } from '../src/process/launch.ts';
import net from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startOwnStack, type OwnStack, type OwnStackOptions } from '../src/stack/own-stack.ts';
import { freePort } from '../src/stack/services.ts';
import type { ProcessName, StartProcessOptions } from '../src/stack/processes.ts';

// Child processes for benchmarks, run from the repo root with stdout/stderr to
// bench/results/logs/<name>.log: catraca's own processes through src/stack/processes.ts (compiled,
// see benchCompiled) in a stack of the benchmark's own (src/stack/own-stack.ts), the benchmarks'
// helpers (the mock upstream, relays) from their sources; readiness by a log line or a TCP port.

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const LOG_DIR = join(ROOT, 'bench', 'results', 'logs');

// Children still running when this process exits (an error, Ctrl-C, a timeout) are killed, so a
// benchmark never leaves a stack behind.
const live = new Set<ChildProcess>();
let exitHook = false;
export function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

export interface Proc {
  name: string;
  /** absent for a server started through src/stack/services.ts (the benchmark's nats-server) */
  child?: ChildProcess;
  pid: number;
  logFile: string;
  /** VmHWM (peak resident set) in KiB from /proc/<pid>/status; null once the process is gone. */
  peakRssKiB(): number | null;
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
}

export function readVmHWM(pid: number): number | null {
  try {
    const m = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** utime + stime of a process in seconds (from /proc/<pid>/stat; clock ticks of 1/100 s). */
export function readCpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return null;
  }
}

/** CPU seconds of a process and all its children (e.g. a postmaster and its backends). */
export function readCpuSecondsOfTree(rootPid: number): number {
  let sum = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(d) === rootPid || Number(fields[1]) === rootPid) sum += (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      // gone meanwhile
    }
  }
  return sum;
}

/** Machine-wide CPU jiffies from /proc/stat: busy and total (all cores). */
export function readMachineCpu(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.reduce((a, b) => a + b, 0);
  const idle = (v[3] ?? 0) + (v[4] ?? 0); // idle + iowait
  return { busy: total - idle, total };
}

/** Summed utime+stime (s) of every process whose command name is `comm` (e.g. the postgres server and its backends). */
export function readCpuSecondsByComm(comm: string): number {
  let sum = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/comm`, 'utf8').trim() !== comm) continue;
      sum += readCpuSeconds(Number(d)) ?? 0;
    } catch {
      // gone meanwhile
    }
  }
  return sum;
}

let built = false;

/**
 * Whether catraca's processes run as production runs them: compiled, from dist/ (built once per
 * benchmark run with `npm run build`). tsx costs CPU per request of its own (esbuild's keep-names
 * wrapper on every closure, source maps). BENCH_SOURCE=ts runs the sources through tsx.
 */
export function benchCompiled(): boolean {
  if (process.env.BENCH_SOURCE === 'ts') return false;
  if (!built) {
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs')], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status !== 0) throw new Error('bench: npm run build failed (BENCH_SOURCE=ts runs the sources through tsx instead)');
    built = true;
  }
  return true;
}

/** BENCH_NODE_ARGS: extra node flags for every stack process (e.g. --perf-basic-prof for `perf`). */
const benchNodeFlags = () => (process.env.BENCH_NODE_ARGS ? process.env.BENCH_NODE_ARGS.split(' ').filter(Boolean) : []);

function logFileOf(name: string): string {
  mkdirSync(LOG_DIR, { recursive: true });
  return join(LOG_DIR, `${name}.log`);
}

function asProc(p: Launched, logFile: string): Proc {
  track(p.child);
  return {
    name: p.name,
    child: p.child,
    pid: p.pid,
    logFile,
    peakRssKiB: () => readVmHWM(p.pid),
    stop: (signal = 'SIGTERM', timeoutMs = 5000) => p.stop(signal, timeoutMs),
  };
}

/** A benchmark helper (bench/…): its source through tsx. */
export function spawnEntry(name: string, entry: string, env: Record<string, string | undefined>, nodeArgs: string[] = []): Proc {
  const logFile = logFileOf(name);
  return asProc(launch({ name, entry: join(ROOT, entry), cwd: ROOT, env, nodeFlags: [...benchNodeFlags(), ...nodeArgs], logFile }), logFile);
}

/** A stack of the benchmark's own: nats-server (logging to LOG_DIR/<natsLog>.log) and PostgreSQL unless given. */
export function startBenchStack(o: Omit<OwnStackOptions, 'processDefaults'> & { natsLog?: string }): Promise<OwnStack> {
  const trace = process.env.BENCH_NATS_TRACE ? [process.env.BENCH_NATS_TRACE] : [];
  return startOwnStack({
    ...o,
    natsArgs: ['-l', logFileOf(o.natsLog ?? 'nats-server'), ...trace, ...(o.natsArgs ?? [])],
    processDefaults: { root: ROOT, compiled: benchCompiled(), logLevel: 'warn' },
  });
}

export interface BenchProcessesOptions {
  /** Names are `<namePrefix>metering`, `<namePrefix>worker-N`, `<namePrefix>gateway[-N]` (default ''); instances (CATRACA_INSTANCE) `<instancePrefix>…` (default 'bench-'). */
  namePrefix?: string;
  instancePrefix?: string;
  workers: number;
  workerPools: string;
  workerConcurrency?: number;
  gateways: number;
  /** the first front door's port (default: a free one) */
  gatewayPort?: number;
  /** GATEWAY_LOCAL_POOLS of every front door */
  localPools?: string;
  /** the upstream key variables, for the workers and for front doors that serve pools themselves */
  upstreamEnv?: Record<string, string>;
  /** more environment for every front door (e.g. GATEWAY_TRUSTED_PROXIES) */
  gatewayEnv?: Record<string, string>;
  /** profile the first of each kind (node --cpu-prof) into <dir>/metering, <dir>/worker, <dir>/gateway */
  cpuProfDir?: string;
}

/**
 * Metering, then the workers, then the front doors, one after another, each ready before the next
 * starts (metering and workers log at info for their ready lines; front doors at warn, ready once
 * their port answers).
 */
export async function startBenchProcesses(stack: OwnStack, o: BenchProcessesOptions): Promise<{ procs: Proc[]; gatewayUrls: string[] }> {
  const procs: Proc[] = [];
  const start = (kind: ProcessName, base: string, first: boolean, place: Partial<StartProcessOptions>) => {
    const name = (o.namePrefix ?? '') + base;
    const logFile = logFileOf(name);
    const p = stack.start(kind, {
      name,
      logFile,
      instance: (o.instancePrefix ?? 'bench-') + base,
      nodeFlags: benchNodeFlags(),
      cpuProfDir: o.cpuProfDir && first ? join(o.cpuProfDir, kind) : undefined,
      ...place,
    });
    procs.push(asProc(p, logFile));
    return p;
  };
  await start('metering', 'metering', true, { logLevel: 'info' }).ready(45000);
  for (let i = 0; i < o.workers; i++) {
    const concurrency = o.workerConcurrency !== undefined ? { WORKER_CONCURRENCY: String(o.workerConcurrency) } : {};
    await start('worker', `worker-${i + 1}`, i === 0, { logLevel: 'info', pools: o.workerPools, env: { ...concurrency, ...o.upstreamEnv } }).ready(45000);
  }
  const gatewayUrls: string[] = [];
  for (let i = 0; i < o.gateways; i++) {
    const port = i === 0 && o.gatewayPort ? o.gatewayPort : await freePort();
    const local = o.localPools ? { pools: o.localPools } : {};
    const env = { ...(o.localPools ? o.upstreamEnv : {}), ...o.gatewayEnv };
    start('gateway', i === 0 ? 'gateway' : `gateway-${i + 1}`, i === 0, { host: '127.0.0.1', port, ...local, env });
    await waitForPort(port, '127.0.0.1', 45000, procs.at(-1));
    gatewayUrls.push(`http://127.0.0.1:${port}/v1`);
  }
  return { procs, gatewayUrls };
}

export function waitForPort(port: number, host = '127.0.0.1', timeoutMs = 20000, proc?: Proc): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolveP, reject) => {
    const attempt = () => {
      if (proc?.child && proc.child.exitCode !== null) return reject(new Error(`${proc.name} exited with ${proc.child.exitCode}; see ${proc.logFile}`));
      const s = net.connect(port, host);
      s.once('connect', () => {
        s.destroy();
        resolveP();
      });
      s.once('error', () => {
        s.destroy();
        if (Date.now() > deadline) reject(new Error(`nothing listening on ${host}:${port} after ${timeoutMs} ms${proc ? `; see ${proc.logFile}` : ''}`));
        else setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

/** Starts bench/mock-upstream/main.ts as a process. Returns its base URL (ends in /v1). */
export async function spawnMock(
  params: { firstTokenMs: number; tokensPerSecond: number; outputTokens: number },
  port?: number,
): Promise<{ proc: Proc; url: string; port: number }> {
  const p = port ?? (await freePort());
  const proc = spawnEntry('mock-upstream', 'bench/mock-upstream/main.ts', {
    MOCK_PORT: String(p),
    MOCK_HOST: '127.0.0.1',
    MOCK_FIRST_TOKEN_MS: String(params.firstTokenMs),
    MOCK_TOKENS_PER_SECOND: String(params.tokensPerSecond),
    MOCK_OUTPUT_TOKENS: String(params.outputTokens),
    LOG_LEVEL: 'warn',
  });
  await waitForPort(p, '127.0.0.1', 20000, proc);
  return { proc, url: `http://127.0.0.1:${p}/v1`, port: p };
}
