// Runs the catraca processes of a local stack as children: prefixes and forwards their output,
// restarts one that dies unexpectedly (exponential backoff, reset after a minute of uptime), and
// stops them all with SIGTERM (SIGKILL after a timeout).
import type { ChildProcess } from 'node:child_process';
import type { Launched, LaunchSpec } from '../process/launch.ts';

export interface ChildSpec {
  name: string;
  /** A line the process prints once it serves (e.g. /worker ready/); see waitReady(). */
  ready?: RegExp;
  /** Starts the child (and starts it again after it died) with these launch options, e.g. through startProcess(). */
  start(launch: Pick<LaunchSpec, 'onLine' | 'detached'>): Launched;
}

export interface SupervisorOptions {
  /** Receives every output line of every child, already prefixed. */
  output?: (line: string, stream: 'stdout' | 'stderr') => void;
  /** Supervisor events (start, exit, restart). */
  event?: (msg: string, fields: Record<string, unknown>, level: 'info' | 'warn') => void;
  stopTimeoutMs?: number;
  maxBackoffMs?: number;
}

interface Managed {
  spec: ChildSpec;
  child: ChildProcess | null;
  restarts: number;
  startedAt: number;
  timer: NodeJS.Timeout | null;
  exited: Promise<void>;
  ready: boolean;
  onReady: Array<() => void>;
}

export class Supervisor {
  private readonly children = new Map<string, Managed>();
  private stopping = false;
  private readonly width: number;

  constructor(
    private readonly specs: ChildSpec[],
    private readonly opts: SupervisorOptions = {},
  ) {
    this.width = Math.max(...specs.map((s) => s.name.length), 4);
  }

  start(): void {
    // Children run in their own process groups; if this process dies without stop(), take them along.
    process.once('exit', this.killAll);
    for (const spec of this.specs) {
      const m: Managed = { spec, child: null, restarts: 0, startedAt: 0, timer: null, exited: Promise.resolve(), ready: !spec.ready, onReady: [] };
      this.children.set(spec.name, m);
      this.launch(m);
    }
  }

  private readonly killAll = () => {
    for (const m of this.children.values()) {
      try {
        m.child?.kill('SIGKILL');
      } catch {}
    }
  };

  pids(): Record<string, number | undefined> {
    return Object.fromEntries([...this.children].map(([n, m]) => [n, m.child?.pid]));
  }

  private launch(m: Managed): void {
    const { spec } = m;
    const prefix = `${spec.name.padEnd(this.width)} |`;
    const { child } = spec.start({
      // Own process group: a Ctrl-C in the terminal reaches only the supervisor, which then stops
      // the children in order (instead of every process racing to exit at once).
      detached: true,
      onLine: (line, stream) => {
        if (!m.ready && spec.ready?.test(line)) {
          m.ready = true;
          for (const fn of m.onReady.splice(0)) fn();
        }
        this.opts.output?.(`${prefix} ${line}`, stream);
      },
    });
    m.child = child;
    m.startedAt = Date.now();
    this.opts.event?.('started', { child: spec.name, pid: child.pid }, 'info');
    m.exited = new Promise((resolveExit) => {
      child.once('exit', (code, signal) => {
        resolveExit();
        if (m.child === child) m.child = null;
        if (this.stopping) return;
        const upMs = Date.now() - m.startedAt;
        if (upMs > 60000) m.restarts = 0;
        const backoff = Math.min(250 * 2 ** m.restarts, this.opts.maxBackoffMs ?? 10000);
        m.restarts++;
        this.opts.event?.(
          'exited unexpectedly; restarting',
          { child: spec.name, code, signal, up_ms: upMs, restart_in_ms: backoff, restarts: m.restarts },
          'warn',
        );
        m.timer = setTimeout(() => {
          m.timer = null;
          if (!this.stopping) this.launch(m);
        }, backoff);
      });
      child.once('error', (err) => this.opts.event?.('spawn error', { child: spec.name, error: err.message }, 'warn'));
    });
  }

  /** Resolves with the names of the children not ready (no `ready` line yet) after `timeoutMs`. */
  async waitReady(timeoutMs: number): Promise<string[]> {
    const pending = [...this.children.values()].filter((m) => !m.ready);
    await Promise.race([
      Promise.all(pending.map((m) => new Promise<void>((r) => (m.ready ? r() : m.onReady.push(r))))),
      new Promise((r) => setTimeout(r, timeoutMs).unref()),
    ]);
    return pending.filter((m) => !m.ready).map((m) => m.spec.name);
  }

  /** SIGTERM every child, wait for all; SIGKILL whoever outlives the timeout. */
  async stop(): Promise<void> {
    this.stopping = true;
    process.removeListener('exit', this.killAll);
    const timeout = this.opts.stopTimeoutMs ?? 15000;
    await Promise.all(
      [...this.children.values()].map(async (m) => {
        if (m.timer) clearTimeout(m.timer);
        const child = m.child;
        if (!child || child.exitCode !== null || child.signalCode !== null) return;
        const killer = setTimeout(() => {
          this.opts.event?.('did not stop in time; killing', { child: m.spec.name, timeout_ms: timeout }, 'warn');
          child.kill('SIGKILL');
        }, timeout);
        child.kill('SIGTERM');
        await m.exited;
        clearTimeout(killer);
      }),
    );
  }
}
