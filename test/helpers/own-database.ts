// A database of a test's own, for work that must not meet other test files' rows in the run's
// shared database (a notifier claiming their deliveries, a bcb portal removing the Pix simulator's
// credentials that their portals use), or that needs an empty one (the migration runner).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ensureDatabase, migrateDatabase } from '../../src/db/migrate.ts';

export interface OwnDatabase {
  url: string;
  name: string;
  /** Drops it (if it was created), ending whatever is still connected. */
  drop(): Promise<void>;
}

/** The URL of a database named after the run's own and `tag`, not created yet. */
export function ownDatabaseUrl(tag: string): OwnDatabase {
  const u = new URL(process.env.DATABASE_URL!);
  const name = `${u.pathname.slice(1)}_${tag}_${randomBytes(4).toString('hex')}`;
  u.pathname = `/${name}`;
  const url = u.toString();
  return {
    url,
    name,
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

/** The same, created (and with `migrate`, migrated). */
export async function ownDatabase(tag: string, o: { migrate?: boolean } = {}): Promise<OwnDatabase> {
  const own = ownDatabaseUrl(tag);
  if (o.migrate) await migrateDatabase(own.url);
  else await ensureDatabase(own.url);
  return own;
}
