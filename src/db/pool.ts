import pg from 'pg';

// int8 columns are money or counters: read them as bigint, never as lossy numbers.
pg.types.setTypeParser(20, (v) => BigInt(v));

export type Db = pg.Pool;
export type DbClient = pg.PoolClient | pg.Pool;

export interface PoolOptions {
  /**
   * Commit without waiting for the WAL flush. Only for connections that write holds (soft
   * reservations), never money: a database crash can lose the last few hundred ms of holds, not
   * of debits or credits (see README, "Holds").
   */
  asyncCommit?: boolean;
}

export function createPool(databaseUrl: string, max = 10, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max,
    idleTimeoutMillis: 30000,
    ...(opts.asyncCommit ? { options: '-c synchronous_commit=off' } : {}),
  });
  // A dropped idle connection must not crash the process; the pool reconnects on next use.
  pool.on('error', () => {});
  return pool;
}

export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    await client.query('rollback').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
