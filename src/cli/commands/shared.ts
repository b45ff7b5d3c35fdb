// What the admin commands share: a database for one command, a NATS broadcast, plain tables.
import { connect as natsConnect } from 'nats';
import { natsOptions } from '../../bus/connect.ts';
import { encode } from '../../bus/messages.ts';
import { createPool, type Db } from '../../db/pool.ts';
import { getTenant } from '../../db/tenants.ts';
import { CliError, type CliContext } from '../context.ts';
import { textTable } from '../table.ts';

/** A table for the human output, or `empty` when it has no rows. */
export const plainTable = (head: string[], rows: string[][], numeric: number[], empty: string) =>
  rows.length ? textTable(head, rows, numeric).join('\n') : empty;

export async function withDb<T>(ctx: CliContext, fn: (db: Db) => Promise<T>): Promise<T> {
  const db = createPool(ctx.databaseUrl(), 1);
  try {
    return await fn(db);
  } catch (err) {
    const e = err as { code?: string; message: string };
    if (e.code === 'ECONNREFUSED') throw new CliError(`cannot reach PostgreSQL (${e.message}); is the stack running?`);
    if (e.code === '42P01') throw new CliError('the database has no catraca schema yet; run the stack once (npm start) or the migrations');
    throw err;
  } finally {
    await db.end().catch(() => {});
  }
}

export async function requireTenant(db: Db, id: string) {
  const tenant = await getTenant(db, id);
  if (!tenant) throw new CliError(`no tenant with id ${JSON.stringify(id)}`);
  return tenant;
}

/** Tells every front door and worker something changed; the database is what counts, so a failure is a warning. */
export async function broadcast(ctx: CliContext, subject: string, body: unknown, done: string, fallback: string): Promise<void> {
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) {
    ctx.warn(`${done}; NATS_URL is not set and no stack is running, so nothing was notified: ${fallback}`);
    return;
  }
  try {
    const nc = await natsConnect({ ...natsOptions(natsUrl), timeout: 3000, reconnect: false, name: 'catraca-cli' });
    try {
      nc.publish(subject, encode(body));
      await nc.flush();
    } finally {
      await nc.close();
    }
  } catch (err) {
    ctx.warn(`${done}, but the NATS broadcast failed (${(err as Error).message}): ${fallback}`);
  }
}
