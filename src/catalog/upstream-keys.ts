import type { NatsConnection } from 'nats';
import type { InstanceRow } from '../bus/instances.ts';

// Whether the workers of a pool can read the key variable a model or deployment names (their
// WORKER_UPSTREAM_KEYS, asked over NATS in $SRV.STATS; workers report names and whether each is
// set, never values). Requests to a model whose variable they cannot read fail with 502
// upstream_not_configured. Used by `catraca model set|deployment add` and the console's catalog.

export interface WorkerKeys {
  instance: string;
  pools: string[];
  /** variable name → whether it is set (non-empty) on that worker */
  keys: Record<string, boolean>;
}

/** The workers that answer $SRV.STATS within `waitMs` (a door's in-process lane counts as one), and their key variables. */
export async function workerUpstreamKeys(nc: NatsConnection, waitMs = 700): Promise<WorkerKeys[]> {
  // loaded here: the CLI commands that do not check keys need none of status's modules
  const { collectInstances } = await import('../bus/instances.ts');
  return workerKeysOf(await collectInstances(nc, { service: 'catraca-worker', waitMs }));
}

/** The workers among the instances of $SRV.STATS, with their pools and key variables. */
export function workerKeysOf(rows: InstanceRow[]): WorkerKeys[] {
  return rows
    .filter((r) => r.service === 'catraca-worker')
    .map((r) => ({
      instance: r.instance,
      pools: Array.isArray(r.extra.pools) ? (r.extra.pools as string[]) : [],
      keys: (r.extra.upstream_keys ?? {}) as Record<string, boolean>,
    }));
}

export interface UpstreamKeyCheck {
  /** no running worker serves the pool */
  noWorker: boolean;
  /** workers of the pool whose WORKER_UPSTREAM_KEYS does not list the variable */
  unlisted: string[];
  /** workers of the pool where the variable is listed but empty */
  empty: string[];
}

export function checkUpstreamKeyOn(workers: WorkerKeys[], pool: string, variable: string): UpstreamKeyCheck {
  const serving = workers.filter((w) => w.pools.includes(pool));
  return {
    noWorker: serving.length === 0,
    unlisted: serving.filter((w) => !(variable in w.keys)).map((w) => w.instance),
    empty: serving.filter((w) => w.keys[variable] === false).map((w) => w.instance),
  };
}
