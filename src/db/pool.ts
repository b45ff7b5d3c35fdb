import pg from 'pg';

// int8 columns are money or counters: read them as bigint, never as lossy numbers.
pg.types.setTypeParser(20, (v) => BigInt(v));

export type Db = pg.Pool;
export type DbClient = pg.PoolClient | pg.Pool;

export function createPool(databaseUrl: string, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max, idleTimeoutMillis: 30000 });
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
