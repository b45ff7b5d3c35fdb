import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { bootstrapRoles, type LoginRole, type RolePasswords } from './roles.ts';

// The schema lives in two folders next to this file (the build copies both to dist/):
//   migrations/NNN_*.sql  history: tables, indexes, data changes, drops, in order, each applied once
//                         (schema_migrations) and never edited after it shipped. They also hold
//                         every older body of the SQL functions, as they were when applied.
//   functions/*.sql       the current definition of every SQL function, one file per function named
//                         after it (`create or replace function …`, with its comment): where a
//                         function is read and changed. After the pending migrations, every file
//                         whose sha256 differs from the one recorded in schema_functions is applied
//                         in its own transaction, and all of them when this run applied a migration
//                         (which may have dropped or replaced a function), so the files always have
//                         the last word. A fresh database runs the whole history, then the files.
// A migration that calls a function gets the body the migrations before it left on a fresh
// database, the file's on one migrated before: it must work with either.
// Changing a function: edit its file. Changing its arguments or result type, or removing it: a new
// migration that drops the old one (`create or replace` cannot change them), and the edited or
// removed file. Triggers (`create trigger`) and views, if any, belong in migrations; their trigger
// functions in functions/. test/db/functions.test.ts checks that the database's catraca_* functions
// are exactly those of the files. All of it runs under one advisory lock: concurrent migrate()
// calls run one after the other.
// Before anything, the roles (src/db/roles.ts): connected as a superuser the runner creates the
// missing ones and makes catraca_owner own everything, then everything runs as catraca_owner.

const HERE = dirname(fileURLToPath(import.meta.url));
const MIGRATIONS_DIR = join(HERE, 'migrations');
export const FUNCTIONS_DIR = join(HERE, 'functions');

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
        // created concurrently: 42P04 once the other's is committed, 23505 while it is being committed
        if (err.code !== '42P04' && err.code !== '23505') throw err;
      });
  } finally {
    await client.end();
  }
}

export const MIGRATION_FILE = /^\d+_.*\.sql$/;

/** sha256 (hex) of a migration or function file's bytes, as recorded in schema_migrations or schema_functions. */
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

export const FUNCTION_FILE = /\.sql$/;

/** What one migrate run applied: migration files, then function files, each in the order applied. */
export interface MigrateResult {
  migrations: string[];
  functions: string[];
  /** With `rolePasswords`: the roles whose password is now the one given (a non-superuser cannot tell or set them). */
  rolePasswords?: LoginRole[];
}

export interface MigrateOptions {
  dir?: string;
  functionsDir?: string;
  /** Passwords for the process roles (LOGIN), set when the runner connects as a superuser; the others are left as they are. */
  rolePasswords?: RolePasswords;
}

/**
 * Applies every migrations/NNN_*.sql not yet applied, in order, each in its own transaction, and
 * records the sha256 of each file applied. Before applying anything it checks every applied file
 * against its recorded checksum and refuses to run when one changed. A database migrated before
 * checksums existed gets the column, backfilled from the files as they are now.
 *
 * Then applies the function files (see the top of this file) of `functionsDir`: by default the
 * shipped functions/ when `dir` is the shipped migrations/, none when `dir` is given (a test's or a
 * benchmark's own set of migrations, e.g. history up to some migration).
 */
export async function migrateDatabase(databaseUrl: string, options: MigrateOptions = {}): Promise<MigrateResult> {
  const dir = options.dir ?? MIGRATIONS_DIR;
  const functionsDir = options.functionsDir ?? (options.dir === undefined ? FUNCTIONS_DIR : undefined);
  await ensureDatabase(databaseUrl);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const result: MigrateResult = { migrations: [], functions: [] };
  try {
    await client.query('select pg_advisory_lock(7261001)');
    const roles = await bootstrapRoles(client, options.rolePasswords);
    if (options.rolePasswords) result.rolePasswords = roles.passwords;
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
        result.migrations.push(file);
      } catch (err) {
        await client.query('rollback');
        throw new Error(`migration ${file} failed: ${(err as Error).message}`);
      }
    }
    if (functionsDir) result.functions = await applyFunctions(client, functionsDir, result.migrations.length > 0);
  } finally {
    await client.query('select pg_advisory_unlock(7261001)').catch(() => {});
    await client.end();
  }
  return result;
}

/** migrateDatabase(), returning the migration files applied. */
export async function migrate(databaseUrl: string, options: MigrateOptions = {}): Promise<string[]> {
  return (await migrateDatabase(databaseUrl, options)).migrations;
}

/**
 * Applies each function file of `dir` whose sha256 differs from the one recorded in
 * schema_functions (every file when `all`), each in its own transaction with its record. Rows of
 * files no longer in `dir` are forgotten, so a file that comes back is applied again. The caller
 * holds the advisory lock.
 */
async function applyFunctions(client: pg.Client, dir: string, all: boolean): Promise<string[]> {
  await client.query(
    'create table if not exists schema_functions (name text primary key, checksum text not null, applied_at timestamptz not null default now())',
  );
  const files = readdirSync(dir)
    .filter((f) => FUNCTION_FILE.test(f))
    .sort();
  const recorded = new Map<string, string>((await client.query('select name, checksum from schema_functions')).rows.map((r) => [r.name, r.checksum]));
  await client.query('delete from schema_functions where not (name = any($1))', [files]);
  const applied: string[] = [];
  for (const file of files) {
    const body = readFileSync(join(dir, file));
    const checksum = migrationChecksum(body);
    if (!all && recorded.get(file) === checksum) continue;
    await client.query('begin');
    try {
      await client.query(body.toString('utf8'));
      await client.query(
        'insert into schema_functions (name, checksum) values ($1, $2) on conflict (name) do update set checksum = excluded.checksum, applied_at = now()',
        [file, checksum],
      );
      await client.query('commit');
      applied.push(file);
    } catch (err) {
      await client.query('rollback');
      throw new Error(`function file ${file} failed: ${(err as Error).message}`);
    }
  }
  return applied;
}
