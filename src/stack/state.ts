// `.catraca/stack.json`: how the stack that `npm start` runs from this checkout can be reached, so
// the admin CLI in a second terminal talks to it. Mode 0600; never holds an API key.
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

export interface StackState {
  database_url: string;
  nats_url: string;
  base_url: string;
  portal_url: string | null;
  /** The operator's console (loopback; `catraca operator create` makes its first account). Absent in a state written before it. */
  console_url?: string | null;
  pid: number;
  started_at: string;
}

/** The checkout root: the nearest directory upwards from `from` whose package.json is catraca's. */
export function findCheckoutRoot(from = process.cwd()): string | null {
  let dir = resolve(from);
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if (JSON.parse(readFileSync(pkg, 'utf8')).name === 'catraca') return dir;
      } catch {}
    }
    const up = dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

export const stateDir = (root: string) => join(root, '.catraca');
export const stateFile = (root: string) => join(stateDir(root), 'stack.json');

export function writeStackState(root: string, state: StackState): string {
  const file = stateFile(root);
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  chmodSync(dirname(file), 0o700);
  writeFileSync(file, JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
  return file;
}

/** The state of a running stack of this checkout, or null (no file, unreadable, or its pid is gone). */
export function readStackState(from = process.cwd()): StackState | null {
  const root = findCheckoutRoot(from);
  return root ? readStackStateAt(root) : null;
}

/** Same, for a known checkout root. */
export function readStackStateAt(root: string): StackState | null {
  const file = stateFile(root);
  if (!existsSync(file)) return null;
  try {
    const state = JSON.parse(readFileSync(file, 'utf8')) as StackState;
    if (!state.database_url || !state.nats_url) return null;
    if (state.pid && !pidAlive(state.pid)) return null; // stale: the stack died without cleaning up
    return state;
  } catch {
    return null;
  }
}

export function removeStackState(root: string, pid = process.pid): void {
  const file = stateFile(root);
  try {
    const state = JSON.parse(readFileSync(file, 'utf8')) as StackState;
    if (state.pid !== pid) return; // another stack owns it now
  } catch {}
  rmSync(file, { force: true });
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
