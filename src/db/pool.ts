import pg from 'pg';

// int8 columns are money or counters: read them as bigint, never as lossy numbers.
pg.types.setTypeParser(20, (v) => BigInt(v));

export type Db = pg.Pool;
export type DbClient = pg.PoolClient | pg.Pool;

export interface PoolOptions {
  /**
   * Commit without waiting for the WAL flush. Only for connections that write holds (soft
   * reservations), never money: a database crash can lose the last few hundred ms of holds, not
   * of debits or credits (see docs/billing.md, "Admission: holds and leases").
   */
  asyncCommit?: boolean;
  /** How long a query may wait for a connection (pool exhausted, or PostgreSQL unreachable), ms. */
  connectTimeoutMs?: number;
  /** PostgreSQL cancels a statement that runs longer than this, ms (0: no limit). */
  statementTimeoutMs?: number;
}

const PG_UNAVAILABLE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  '57P01',
  '57P02',
  '57P03', // admin shutdown, crash shutdown, cannot connect now
  '08000',
  '08001',
  '08003',
  '08004',
  '08006', // connection exceptions
  '53300', // too many connections
]);

/**
 * What a PostgreSQL failure means for a caller: the database is gone or saturated ('unavailable':
 * retry later), a statement ran past its timeout ('timeout'), or anything else (a bug: null).
 */
export function classifyDbError(err: unknown): 'unavailable' | 'timeout' | null {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return null;
  if (e.code === '57014') return 'timeout'; // canceling statement due to statement timeout
  if (e.code && PG_UNAVAILABLE.has(e.code)) return 'unavailable';
  const m = String(e.message ?? '');
  if (/timeout exceeded when trying to connect|Connection terminated|connection error|terminating connection/i.test(m)) return 'unavailable';
  return null;
}

export function createPool(databaseUrl: string, max = 10, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max,
    idleTimeoutMillis: 30000,
    connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
    ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
    ...(opts.asyncCommit ? { options: '-c synchronous_commit=off' } : {}),
  });
  // A dropped idle connection must not crash the process; the pool reconnects on next use.
  pool.on('error', () => {});
  return pool;
}

/**
 * Runs `fn` with a client of its own. While it is checked out a client has no listener of the
 * pool's, so a connection lost between two queries (PostgreSQL killed while `fn` awaits something
 * else, e.g. a PSP call) would be an unhandled 'error' event that ends the process: it is caught
 * here, and the broken client is destroyed instead of going back to the pool.
 */
export async function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (err: Error) => {
    broken = err;
  };
  client.on('error', onError);
  try {
    return await fn(client);
  } catch (err) {
    if (classifyDbError(err) === 'unavailable') broken ??= err as Error;
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/** `begin` may name the isolation level, e.g. `begin isolation level repeatable read read only`. */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>, begin = 'begin'): Promise<T> {
  return withClient(pool, async (client) => {
    try {
      await client.query(begin);
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => {});
      throw err;
    }
  });
}
