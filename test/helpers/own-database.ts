// A database of a test's own, for a process whose background work would otherwise act on other test
// files' rows in the run's shared database (a notifier claiming their deliveries, a bcb portal
// removing the Pix simulator's credentials that their portals use).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ensureDatabase, migrateDatabase } from '../../src/db/migrate.ts';

export interface OwnDatabase {
  url: string;
  /** Drops it, ending whatever is still connected. */
  drop(): Promise<void>;
}

/** Creates (and with `migrate`, migrates) a database named after the run's own and `tag`. */
export async function ownDatabase(tag: string, o: { migrate?: boolean } = {}): Promise<OwnDatabase> {
  const u = new URL(process.env.DATABASE_URL!);
  const name = `${u.pathname.slice(1)}_${tag}_${randomBytes(4).toString('hex')}`;
  u.pathname = `/${name}`;
  const url = u.toString();
  if (o.migrate) await migrateDatabase(url);
  else await ensureDatabase(url);
  return {
    url,
    async drop() {
      const admin = new URL(url);
      admin.pathname = '/postgres';
      const c = new pg.Client({ connectionString: admin.toString() });
      await c.connect();
      try {
        await c.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await c.end();
      }
    },
  };
}
