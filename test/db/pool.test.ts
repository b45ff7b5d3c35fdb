import { afterAll, describe, expect, it } from 'vitest';
import { createPool, withClient, withTransaction } from '../../src/db/pool.ts';

// A connection lost while a client is checked out, between two of its queries (the database
// restarted while the code awaits something else), must be an error of that call, never an
// unhandled 'error' event that ends the process; and the broken client must not return to the pool.
const pool = createPool(process.env.DATABASE_URL!, 2);
const admin = createPool(process.env.DATABASE_URL!, 1);

afterAll(async () => {
  await pool.end();
  await admin.end();
});

describe('withClient / withTransaction', () => {
  it('a connection killed between two queries fails the call, not the process; the pool serves the next call', async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const failed = await withTransaction(pool, async (c) => {
        const pid = (await c.query('select pg_backend_pid() as pid')).rows[0].pid as number;
        await admin.query('select pg_terminate_backend($1)', [pid]);
        await new Promise((r) => setTimeout(r, 300)); // the socket closes while nothing is in flight
        await c.query('select 1');
      }).then(
        () => null,
        (e: Error) => e,
      );
      expect(failed).toBeInstanceOf(Error);
      expect(uncaught).toEqual([]);
      // the broken client was destroyed: both pooled connections work
      const pids = await Promise.all([1, 2].map(() => withClient(pool, async (c) => (await c.query('select pg_backend_pid() as pid')).rows[0].pid)));
      expect(pids.every((p) => typeof p === 'number')).toBe(true);
      expect(pool.totalCount).toBeLessThanOrEqual(2);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('commits, and rolls back on a throw', async () => {
    const r = await withTransaction(pool, async (c) => (await c.query('select 41 + 1 as n')).rows[0].n);
    expect(r).toBe(42);
    await expect(
      withTransaction(pool, async () => {
        throw new Error('nope');
      }),
    ).rejects.toThrow('nope');
  });
});
