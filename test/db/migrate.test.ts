// Migrations record the sha256 of each applied file and refuse to run when one changed; function
// files are applied after them, again whenever they change.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { migrate, migrateDatabase, MigrationChecksumError } from '../../src/db/migrate.ts';

const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');
const created: string[] = [];

/** A fresh database of its own (dropped after the file). */
function freshDb(): string {
  const u = new URL(process.env.DATABASE_URL!);
  const name = `${u.pathname.slice(1)}_mig_${randomBytes(3).toString('hex')}`;
  created.push(name);
  u.pathname = `/${name}`;
  return u.toString();
}

async function query<T = Record<string, unknown>>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql, params)).rows as T[];
  } finally {
    await c.end();
  }
}

function migrationsDir(files: Record<string, string>, prefix = 'catraca-migrations-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), body);
  return dir;
}

afterAll(async () => {
  for (const name of created) await query(process.env.DATABASE_URL!, `drop database if exists "${name}" with (force)`).catch(() => {});
});

describe('migrate', () => {
  test('records the sha256 of every file it applies; a second run applies nothing', async () => {
    const url = freshDb();
    const one = 'create table a (id int);\n';
    const two = 'create table b (id int);\n';
    const dir = migrationsDir({ '001_a.sql': one, '002_b.sql': two, 'README.md': 'not a migration' });
    try {
      expect(await migrate(url, { dir })).toEqual(['001_a.sql', '002_b.sql']);
      expect(await query(url, 'select version, checksum from schema_migrations order by version')).toEqual([
        { version: '001_a.sql', checksum: sha256(one) },
        { version: '002_b.sql', checksum: sha256(two) },
      ]);
      expect(await migrate(url, { dir })).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('refuses to run when an applied file changed, naming it, and applies nothing new', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': 'create table a (id int);\n' });
    try {
      await migrate(url, { dir });
      writeFileSync(join(dir, '001_a.sql'), 'create table a (id bigint);\n');
      writeFileSync(join(dir, '002_b.sql'), 'create table b (id int);\n');
      const err = await migrate(url, { dir }).catch((e) => e);
      expect(err).toBeInstanceOf(MigrationChecksumError);
      expect(err.message).toMatch(
        /^migration 001_a\.sql was changed after it was applied \(sha256 recorded [0-9a-f]{12}…, file now [0-9a-f]{12}…\): restore the file as it was applied and put the change in a new migration$/,
      );
      expect(err.file).toBe('001_a.sql');
      expect(await query(url, `select to_regclass('b') is null as missing`)).toEqual([{ missing: true }]);
      expect((await query(url, 'select version from schema_migrations')).map((r) => r.version)).toEqual(['001_a.sql']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a database from before checksums gets the column, backfilled from the files, then is checked like any other', async () => {
    const url = freshDb();
    const one = 'create table a (id int);\n';
    const dir = migrationsDir({ '001_a.sql': one, '002_b.sql': 'create table b (id int);\n' });
    try {
      // What the previous migrate() left: the table without the column, 001 applied.
      await query(url.replace(/\/[^/]*$/, '/postgres'), `create database "${new URL(url).pathname.slice(1)}"`);
      await query(url, 'create table schema_migrations (version text primary key, applied_at timestamptz not null default now())');
      await query(url, one);
      await query(url, `insert into schema_migrations (version) values ('001_a.sql')`);

      expect(await migrate(url, { dir })).toEqual(['002_b.sql']);
      expect(await query(url, 'select version, checksum from schema_migrations order by version')).toEqual([
        { version: '001_a.sql', checksum: sha256(one) },
        { version: '002_b.sql', checksum: sha256('create table b (id int);\n') },
      ]);
      writeFileSync(join(dir, '001_a.sql'), one + '-- edited\n');
      await expect(migrate(url, { dir })).rejects.toThrow('migration 001_a.sql was changed after it was applied');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the run's database (migrated by the test setup) has a checksum for every shipped migration", async () => {
    const dir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'db', 'migrations');
    const rows = await query<{ version: string; checksum: string }>(
      process.env.DATABASE_URL!,
      'select version, checksum from schema_migrations order by version',
    );
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.sql'))
      .sort();
    expect(rows).toEqual(files.map((f) => ({ version: f, checksum: sha256(readFileSync(join(dir, f))) })));
  });
});

describe('migrate: function files', () => {
  /** f() as the migration 001 created it, and a function file replacing it. */
  const fn = (says: string) => `create or replace function f() returns text language sql as $$ select '${says}'::text $$;\n`;
  const says = async (url: string) => (await query<{ f: string }>(url, 'select f()'))[0].f;
  const recorded = async (url: string) =>
    query<{ name: string; checksum: string; applied_at: Date }>(url, 'select name, checksum, applied_at from schema_functions order by name');

  test('applied after the migrations; an unchanged file is not applied again, a changed one is, and all of them after a new migration', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': `create table a (id int);\n${fn('history')}` });
    const functionsDir = migrationsDir({ 'f.sql': fn('v1') }, 'catraca-functions-');
    try {
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: ['001_a.sql'], functions: ['f.sql'] });
      expect(await says(url)).toBe('v1');
      const first = await recorded(url);
      expect(first).toEqual([{ name: 'f.sql', checksum: sha256(fn('v1')), applied_at: expect.any(Date) }]);

      // Unchanged: not applied again (a body changed behind its back stays; the row is untouched).
      await query(url, fn('by hand'));
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: [], functions: [] });
      expect(await says(url)).toBe('by hand');
      expect(await recorded(url)).toEqual(first);

      // Changed: applied, its new checksum recorded.
      writeFileSync(join(functionsDir, 'f.sql'), fn('v2'));
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: [], functions: ['f.sql'] });
      expect(await says(url)).toBe('v2');
      expect((await recorded(url)).map((r) => r.checksum)).toEqual([sha256(fn('v2'))]);

      // A new migration may replace or drop functions: every file is applied again after it.
      writeFileSync(join(dir, '002_b.sql'), `drop function f();\n`);
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: ['002_b.sql'], functions: ['f.sql'] });
      expect(await says(url)).toBe('v2');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(functionsDir, { recursive: true, force: true });
    }
  });

  test('a file that fails is rolled back and named, its checksum not recorded; it is tried again on the next run', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': fn('history') });
    const functionsDir = migrationsDir({ 'f.sql': `${fn('half')}select 1/0;\n` }, 'catraca-functions-');
    try {
      await expect(migrateDatabase(url, { dir, functionsDir })).rejects.toThrow('function file f.sql failed: division by zero');
      expect(await says(url)).toBe('history');
      expect(await recorded(url)).toEqual([]);
      expect((await query(url, 'select version from schema_migrations')).map((r) => r.version)).toEqual(['001_a.sql']);
      writeFileSync(join(functionsDir, 'f.sql'), fn('fixed'));
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: [], functions: ['f.sql'] });
      expect(await says(url)).toBe('fixed');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(functionsDir, { recursive: true, force: true });
    }
  });

  test('a removed file is forgotten, so it is applied again when it comes back', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': fn('history') });
    const functionsDir = migrationsDir(
      { 'f.sql': fn('v1'), 'g.sql': 'create or replace function g() returns int language sql as $$ select 1 $$;\n' },
      'catraca-functions-',
    );
    try {
      await migrateDatabase(url, { dir, functionsDir });
      rmSync(join(functionsDir, 'f.sql'));
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: [], functions: [] });
      expect((await recorded(url)).map((r) => r.name)).toEqual(['g.sql']);
      await query(url, fn('by hand'));
      writeFileSync(join(functionsDir, 'f.sql'), fn('v1'));
      expect(await migrateDatabase(url, { dir, functionsDir })).toEqual({ migrations: [], functions: ['f.sql'] });
      expect(await says(url)).toBe('v1');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(functionsDir, { recursive: true, force: true });
    }
  });

  test('concurrent runs: the advisory lock covers the function files too, each applied by one run only', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': fn('history') });
    const functionsDir = migrationsDir({ 'f.sql': fn('v1') }, 'catraca-functions-');
    try {
      const runs = await Promise.all([1, 2, 3, 4].map(() => migrateDatabase(url, { dir, functionsDir })));
      expect(runs.flatMap((r) => r.migrations)).toEqual(['001_a.sql']);
      expect(runs.flatMap((r) => r.functions)).toEqual(['f.sql']);
      expect(await says(url)).toBe('v1');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(functionsDir, { recursive: true, force: true });
    }
  });

  test('with migrations of its own and no functionsDir (a benchmark up to some migration), no function file is applied', async () => {
    const url = freshDb();
    const dir = migrationsDir({ '001_a.sql': fn('history') });
    try {
      expect(await migrateDatabase(url, { dir })).toEqual({ migrations: ['001_a.sql'], functions: [] });
      expect(await says(url)).toBe('history');
      expect(await query(url, `select to_regclass('schema_functions') is null as missing`)).toEqual([{ missing: true }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
