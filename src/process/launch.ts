// The one way catraca starts one of its processes as a child: `npm start`'s supervisor, the
// benchmarks and the integration tests all go through `launch`. It runs a compiled `.js` entry
// with plain node and a `.ts` entry through tsx, reads the child's output line by line (kept,
// handed to a callback, written to a log file — whatever the caller asks), and stops it with a
// signal, then SIGKILL after a timeout.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

/** Node arguments that run an entry: a compiled `.js` as is; a `.ts` through tsx (a dev dependency). */
export function nodeArgs(entry: string, cwd: string): string[] {
  return entry.endsWith('.js') ? [entry] : tsxArgs(entry, cwd);
}

/** Node arguments that run a .ts entry: `--import tsx` when this tsx supports it, else its cli. */
export function tsxArgs(entry: string, cwd: string): string[] {
  const require = createRequire(`${cwd}/package.json`);
  try {
    require.resolve('tsx/esm/api');
    return ['--import', 'tsx', entry];
  } catch {
    return [require.resolve('tsx/cli'), entry];
  }
}

export interface LaunchSpec {
  name: string;
  /** absolute path of the entry point */
  entry: string;
  cwd: string;
  /** added to this process's environment */
  env?: Record<string, string | undefined>;
  /** node flags before the entry (e.g. --cpu-prof) */
  nodeFlags?: string[];
  /** every output line, as it comes */
  onLine?: (line: string, stream: 'stdout' | 'stderr') => void;
  /** keep the lines in `lines` (tests read them) */
  keepLines?: boolean;
  /** append every line to this file (emptied first, synchronously, so a waiter never reads the previous run's) */
  logFile?: string;
  /** own process group (the supervisor's children: a Ctrl-C reaches only the supervisor) */
  detached?: boolean;
}

export interface Launched {
  name: string;
  child: ChildProcess;
  pid: number;
  lines: string[];
  /** the exit code (null when killed by a signal) */
  exited: Promise<number | null>;
  /** resolves with the first line (already printed or to come) matching `pattern` */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** sends `signal`, then SIGKILL after `timeoutMs`; resolves with the exit code */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
}

export function launch(spec: LaunchSpec): Launched {
  let fd: number | null = null;
  if (spec.logFile) {
    closeSync(openSync(spec.logFile, 'w'));
    fd = openSync(spec.logFile, 'a');
  }
  const child = spawn(process.execPath, [...(spec.nodeFlags ?? []), ...nodeArgs(spec.entry, spec.cwd)], {
    cwd: spec.cwd,
    env: { ...process.env, ...spec.env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: spec.detached ?? false,
  });
  const lines: string[] = [];
  const waiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = [];
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      if (fd !== null) closeSync(fd);
      fd = null;
      resolve(code);
    });
    child.once('error', () => resolve(null));
  });
  for (const stream of ['stdout', 'stderr'] as const) {
    createInterface({ input: child[stream]! }).on('line', (line) => {
      lines.push(line);
      if (!spec.keepLines && lines.length > 400) lines.splice(0, 200);
      if (fd !== null) writeSync(fd, line + '\n');
      spec.onLine?.(line, stream);
      for (let i = waiters.length - 1; i >= 0; i--) {
        if (waiters[i].pattern.test(line)) waiters.splice(i, 1)[0].resolve(line);
      }
    });
  }
  return {
    name: spec.name,
    child,
    pid: child.pid!,
    lines,
    exited,
    waitFor(pattern, timeoutMs = 45000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const w = {
          pattern,
          resolve: (l: string) => {
            clearTimeout(timer);
            resolve(l);
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          reject(new Error(`${spec.name}: no line matching ${pattern} within ${timeoutMs} ms:\n${lines.slice(-40).join('\n')}`));
        }, timeoutMs);
        waiters.push(w);
        void exited.then((code) => {
          if (!waiters.includes(w)) return;
          waiters.splice(waiters.indexOf(w), 1);
          clearTimeout(timer);
          reject(new Error(`${spec.name} exited with ${code} before a line matching ${pattern}:\n${lines.slice(-40).join('\n')}`));
        });
      });
    },
    async stop(signal = 'SIGTERM', timeoutMs = 15000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(killer);
      return code;
    },
  };
}
