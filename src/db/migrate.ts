import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations');

/** Creates the database named in the URL if it does not exist (connecting to `postgres`). */
export async function ensureDatabase(databaseUrl: string): Promise<void> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  if (!name) return;
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (!rowCount)
      await client.query(`create database "${name.replace(/"/g, '""')}"`).catch((err) => {
        if (err.code !== '42P04') throw err; // created concurrently
      });
  } finally {
    await client.end();
  }
}

export const MIGRATION_FILE = /^\d+_.*\.sql$/;

/** sha256 (hex) of a migration file's bytes, as recorded in schema_migrations.checksum. */
export function migrationChecksum(contents: Buffer | string): string {
  return createHash('sha256').update(contents).digest('hex');
}

/** A migration that was applied and whose file has changed since: refused, never re-run. */
export class MigrationChecksumError extends Error {
  constructor(
    readonly file: string,
    readonly recorded: string,
    readonly actual: string,
  ) {
    super(
      `migration ${file} was changed after it was applied (sha256 recorded ${recorded.slice(0, 12)}…, file now ${actual.slice(0, 12)}…): ` +
        'restore the file as it was applied and put the change in a new migration',
    );
    this.name = 'MigrationChecksumError';
  }
}

/**
 * Applies every migrations/NNN_*.sql not yet applied, in order, each in its own transaction, and
 * records the sha256 of each file applied. Before applying anything it checks every applied file
 * against its recorded checksum and refuses to run when one changed. A database migrated before
 * checksums existed gets the column, backfilled from the files as they are now.
 */
export async function migrate(databaseUrl: string, options: { dir?: string } = {}): Promise<string[]> {
  const dir = options.dir ?? MIGRATIONS_DIR;
  await ensureDatabase(databaseUrl);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const applied: string[] = [];
  try {
    await client.query('select pg_advisory_lock(7261001)');
    await client.query('create table if not exists schema_migrations (version text primary key, applied_at timestamptz not null default now(), checksum text)');
    await client.query('alter table schema_migrations add column if not exists checksum text');
    const files = readdirSync(dir)
      .filter((f) => MIGRATION_FILE.test(f))
      .sort();
    const contents = new Map(files.map((f) => [f, readFileSync(join(dir, f))]));
    const done = new Map<string, string | null>(
      (await client.query('select version, checksum from schema_migrations')).rows.map((r) => [r.version as string, r.checksum as string | null]),
    );
    for (const [version, recorded] of done) {
      const body = contents.get(version);
      if (!body) continue; // applied by another build; nothing to compare against
      const actual = migrationChecksum(body);
      if (recorded === null) {
        await client.query('update schema_migrations set checksum = $2 where version = $1 and checksum is null', [version, actual]);
      } else if (recorded !== actual) {
        throw new MigrationChecksumError(version, recorded, actual);
      }
    }
    for (const file of files) {
      if (done.has(file)) continue;
      const body = contents.get(file)!;
      await client.query('begin');
      try {
        await client.query(body.toString('utf8'));
        await client.query('insert into schema_migrations (version, checksum) values ($1, $2)', [file, migrationChecksum(body)]);
        await client.query('commit');
        applied.push(file);
      } catch (err) {
        await client.query('rollback');
        throw new Error(`migration ${file} failed: ${(err as Error).message}`);
      }
    }
  } finally {
    await client.query('select pg_advisory_unlock(7261001)').catch(() => {});
    await client.end();
  }
  return applied;
}
