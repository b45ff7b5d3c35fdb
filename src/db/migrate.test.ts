// Migrations record the sha256 of each applied file and refuse to run when one changed.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { migrate, MigrationChecksumError } from './migrate.ts';

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

function migrationsDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'catraca-migrations-'));
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
    const dir = join(dirname(fileURLToPath(import.meta.url)), 'migrations');
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
