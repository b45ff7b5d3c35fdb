import type { Logger } from '../log.ts';

export interface ShutdownOptions {
  /** Exit 1 if the steps have not finished after this long (a drain that hangs must not keep the pod). */
  forceAfterMs: number;
  /** Fields for the "shutting down" line (e.g. in-flight counts). */
  describe?: () => Record<string, unknown>;
  /** Fields for the "stopped" line. */
  summary?: () => Record<string, unknown>;
  exit?: (code: number) => void;
}

/**
 * The one SIGTERM/SIGINT path of every long-running process: the first signal runs `steps`
 * (drain in-flight work, then close NATS and PostgreSQL) and exits 0; a failure exits 1; a
 * second signal, or steps still running after `forceAfterMs`, exits 1 at once.
 */
export interface Shutdown {
  /** Starts the shutdown; a second call exits at once, unless `again` is 'wait' (it joins the one running). */
  trigger(signal: string, again?: 'exit' | 'wait'): Promise<void>;
}

export function onShutdown(log: Logger, steps: () => Promise<void>, options: ShutdownOptions): Shutdown {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let running: Promise<void> | null = null;
  const trigger = (signal: string, again: 'exit' | 'wait' = 'exit'): Promise<void> => {
    if (running && again === 'wait') return running;
    if (running) {
      log.warn('second signal: exiting now', { signal });
      exit(1);
      return running;
    }
    log.info('shutting down', { signal, ...options.describe?.() });
    const force = setTimeout(() => {
      log.error('shutdown did not finish in time: exiting', { after_ms: options.forceAfterMs });
      exit(1);
    }, options.forceAfterMs);
    force.unref();
    running = steps().then(
      () => {
        clearTimeout(force);
        log.info('stopped', options.summary?.() ?? {});
        exit(0);
      },
      (err: unknown) => {
        clearTimeout(force);
        log.error('shutdown failed', { err: err as Error });
        exit(1);
      },
    );
    return running;
  };
  process.on('SIGTERM', () => void trigger('SIGTERM'));
  process.on('SIGINT', () => void trigger('SIGINT'));
  return { trigger };
}

/**
 * Stops as on SIGTERM once the parent process is gone. Under `npm start`, a SIGTERM sent to npm
 * (a service manager stopping it) ends npm without passing the signal on (npm 11), which would leave
 * the stack running with no one to stop it. A parent that goes while the stack is already stopping
 * (Ctrl-C reaches npm and the stack together) is no second signal: the stop under way finishes,
 * children and embedded services included.
 */
export function stopWithParent(stop: Shutdown, everyMs = 1000): NodeJS.Timeout {
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(watch);
    void stop.trigger('parent exited', 'wait');
  }, everyMs);
  watch.unref();
  return watch;
}

/** Closing steps that may fail without stopping the rest (a NATS drain on a dead connection). */
export async function quietly(p: Promise<unknown> | undefined): Promise<void> {
  await p?.catch(() => {});
}
