// The SQL functions of the run's database (migrated by the test setup: the migrations, then
// src/db/functions/*.sql) are exactly those the function files define, as they define them.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FUNCTION_FILE, FUNCTIONS_DIR, migrationChecksum } from '../../src/db/migrate.ts';

interface Defined {
  file: string;
  /** name(identity arguments), e.g. catraca_release(p_request_id text) */
  signature: string;
  /** pg_get_functiondef, with the schema it was created in written as public */
  definition: string;
}

const files = readdirSync(FUNCTIONS_DIR)
  .filter((f) => FUNCTION_FILE.test(f))
  .sort();
let client: pg.Client;
/** What each file defines: applied in a scratch schema, in a transaction rolled back. */
const defined: Defined[] = [];

const FUNCTIONS_OF = `select p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as signature, pg_get_functiondef(p.oid) as definition
  from pg_proc p where p.pronamespace = $1::regnamespace`;
const bySignature = (a: { signature: string }, b: { signature: string }) => (a.signature < b.signature ? -1 : a.signature > b.signature ? 1 : 0);

beforeAll(async () => {
  client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  for (const file of files) {
    const scratch = `fncheck_${randomBytes(4).toString('hex')}`;
    await client.query('begin');
    try {
      await client.query(`create schema ${scratch}`);
      // Unqualified names are created in the first schema of the path; the tables are in public.
      await client.query(`set local search_path = ${scratch}, public`);
      await client.query(readFileSync(join(FUNCTIONS_DIR, file), 'utf8'));
      const { rows } = await client.query<{ signature: string; definition: string }>(FUNCTIONS_OF, [scratch]);
      for (const r of rows) defined.push({ file, signature: r.signature, definition: r.definition.replaceAll(`${scratch}.`, 'public.') });
    } finally {
      await client.query('rollback');
    }
  }
});

afterAll(async () => {
  await client?.end();
});

describe('src/db/functions', () => {
  test('each file defines its namesake function, and only it; no function is defined twice', () => {
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      const names = defined.filter((d) => d.file === file).map((d) => d.signature.replace(/\(.*$/, ''));
      expect(names, file).toEqual([file.replace(/\.sql$/, '')]);
    }
    const signatures = defined.map((d) => d.signature);
    expect(new Set(signatures).size).toBe(signatures.length);
  });

  test("the database's catraca_* functions are exactly those of the files, each as its file defines it", async () => {
    const { rows } = await client.query<{ signature: string; definition: string }>(`${FUNCTIONS_OF} and p.proname like 'catraca\\_%'`, ['public']);
    rows.sort(bySignature);
    const inFiles = [...defined].sort(bySignature);
    expect(rows.map((r) => r.signature)).toEqual(inFiles.map((d) => d.signature));
    for (const d of inFiles) expect(rows.find((r) => r.signature === d.signature)?.definition, d.file).toBe(d.definition);
    // Nowhere else either (a schema of its own, a leftover overload).
    const elsewhere = await client.query(
      `select p.oid::regprocedure::text from pg_proc p where p.proname like 'catraca\\_%' and p.pronamespace <> 'public'::regnamespace`,
    );
    expect(elsewhere.rows).toEqual([]);
  });

  test('schema_functions records every file with the sha256 it was applied with', async () => {
    const { rows } = await client.query('select name, checksum from schema_functions order by name');
    expect(rows).toEqual(files.map((f) => ({ name: f, checksum: migrationChecksum(readFileSync(join(FUNCTIONS_DIR, f))) })));
  });
});
