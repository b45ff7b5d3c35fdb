// `npm run migrate` (the compose `migrate` service): migrations always, sim/* only when asked for.
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { type OwnDatabase, ownDatabaseUrl } from '../helpers/own-database.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const created: OwnDatabase[] = [];

function freshDatabaseUrl(): string {
  const own = ownDatabaseUrl('migrate');
  created.push(own);
  return own.url;
}

afterAll(async () => {
  for (const own of created) await own.drop().catch(() => {});
});

function migrateMain(databaseUrl: string, args: string[] = [], env: Record<string, string> = {}): Promise<{ code: number; stderr: string }> {
  return new Promise((res) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'src/stack/migrate-main.ts'), ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH!, DATABASE_URL: databaseUrl, ...env }, timeout: 60000 },
      (err, _stdout, stderr) => res({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr }),
    );
  });
}

async function simModels(databaseUrl: string): Promise<string[]> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    return (await c.query(`select id from models where id like 'sim/%' order by id`)).rows.map((r) => r.id);
  } finally {
    await c.end();
  }
}

describe('npm run migrate', () => {
  test('applies the migrations without seeding sim/*; --with-sim or CATRACA_SEED_SIM=1 seeds it', async () => {
    const plain = freshDatabaseUrl();
    const a = await migrateMain(plain);
    expect(a.code).toBe(0);
    expect(a.stderr).toContain('sim/* catalog not seeded (use --with-sim or CATRACA_SEED_SIM=1 for a development database)');
    expect(await simModels(plain)).toEqual([]);
    const b = await migrateMain(plain, ['--with-sim']);
    expect(b.code).toBe(0);
    expect(await simModels(plain)).toEqual(['sim/echo', 'sim/embed', 'sim/lorem']);

    const byEnv = freshDatabaseUrl();
    expect((await migrateMain(byEnv, [], { CATRACA_SEED_SIM: '1' })).code).toBe(0);
    expect(await simModels(byEnv)).toEqual(['sim/echo', 'sim/embed', 'sim/lorem']);

    const bad = await migrateMain(byEnv, ['--seed-everything']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('usage: npm run migrate [-- --with-sim]');
  }, 90000);
});
