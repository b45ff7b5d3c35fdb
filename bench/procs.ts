import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { launch } from '../src/stack/launch.ts';
import net from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// Child processes for benchmarks: spawned with `node --import tsx <entry>` from the repo root,
// stderr/stdout to bench/results/logs/<name>.log, readiness by TCP port or by a log line.

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
  child: ChildProcess;
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
 * The product's entries (src/, workers/) run as production runs them: compiled, from dist/ (built
 * once per benchmark run with `npm run build`). tsx costs CPU per request of its own (esbuild's
 * keep-names wrapper on every closure, source maps). BENCH_SOURCE=ts runs them through tsx.
 */
export function productEntry(entry: string): string {
  if (process.env.BENCH_SOURCE === 'ts' || !/^(src|workers)\//.test(entry)) return entry;
  if (!built) {
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs')], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status !== 0) throw new Error('bench: npm run build failed (BENCH_SOURCE=ts runs the sources through tsx instead)');
    built = true;
  }
  return join('dist', entry.replace(/\.ts$/, '.js'));
}

export function spawnEntry(name: string, entry: string, env: Record<string, string | undefined>, nodeArgs: string[] = []): Proc {
  mkdirSync(LOG_DIR, { recursive: true });
  entry = productEntry(entry);
  const logFile = join(LOG_DIR, `${name}.log`);
  // BENCH_NODE_ARGS: extra node flags for every stack process (e.g. --perf-basic-prof for `perf`)
  const extra = process.env.BENCH_NODE_ARGS ? process.env.BENCH_NODE_ARGS.split(' ').filter(Boolean) : [];
  const p = launch({ name, entry: join(ROOT, entry), cwd: ROOT, env, nodeFlags: [...extra, ...nodeArgs], logFile });
  track(p.child);
  return {
    name,
    child: p.child,
    pid: p.pid,
    logFile,
    peakRssKiB: () => readVmHWM(p.pid),
    stop: (signal = 'SIGTERM', timeoutMs = 5000) => p.stop(signal, timeoutMs),
  };
}

export function waitForPort(port: number, host = '127.0.0.1', timeoutMs = 20000, proc?: Proc): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolveP, reject) => {
    const attempt = () => {
      if (proc && proc.child.exitCode !== null) return reject(new Error(`${proc.name} exited with ${proc.child.exitCode}; see ${proc.logFile}`));
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

/** Resolves when the process' log contains `pattern`. */
export function waitForLog(proc: Proc, pattern: RegExp, timeoutMs = 20000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolveP, reject) => {
    const check = () => {
      const text = existsSync(proc.logFile) ? readFileSync(proc.logFile, 'utf8') : '';
      if (pattern.test(text)) return resolveP();
      if (proc.child.exitCode !== null) return reject(new Error(`${proc.name} exited with ${proc.child.exitCode}; see ${proc.logFile}`));
      if (Date.now() > deadline) return reject(new Error(`${proc.name}: no log line matching ${pattern} after ${timeoutMs} ms; see ${proc.logFile}`));
      setTimeout(check, 100);
    };
    check();
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolveP, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolveP(port));
    });
    srv.on('error', reject);
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
