import { describe, expect, it } from 'vitest';
import { generateApiKey } from '../auth/keys.ts';
import type { Db } from '../db/pool.ts';
import { KeyCache } from './key-cache.ts';

/** A database that knows no key and counts the lookups it is asked for. */
function countingDb() {
  const db = { queries: 0, query: async () => ((db.queries += 1), { rows: [] }) };
  return db;
}

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => 'accepted',
    (e: { code?: string }) => e.code,
  );

describe('KeyCache', () => {
  it('refuses a missing header, another scheme and tokens not shaped like our keys without a database lookup', async () => {
    const db = countingDb();
    const keys = new KeyCache(db as unknown as Db, 30_000);
    expect(await refusal(keys.authenticate(''))).toBe('missing_api_key');
    expect(await refusal(keys.authenticate('Basic dXNlcjpwYXNz'))).toBe('missing_api_key');
    expect(await refusal(keys.authenticate('Bearer sk-proj-abc'))).toBe('invalid_api_key');
    expect(await refusal(keys.authenticate(`Bearer ${'x'.repeat(100_000)}`))).toBe('invalid_api_key');
    expect(await refusal(keys.authenticate(`Bearer ${generateApiKey().slice(0, -1)}Z`))).toBe('invalid_api_key');
    expect(db.queries).toBe(0);
    expect(keys.size).toBe(0);
    expect(await refusal(keys.authenticate(`Bearer ${generateApiKey()}`))).toBe('invalid_api_key');
    expect(db.queries).toBe(1);
  });

  it('keeps at most maxEntries records: a flood of well-formed unknown keys is bounded', async () => {
    const db = countingDb();
    const keys = new KeyCache(db as unknown as Db, 30_000, 10);
    for (let i = 0; i < 50; i++) expect(await refusal(keys.authenticate(`Bearer ${generateApiKey()}`))).toBe('invalid_api_key');
    expect(db.queries).toBe(50);
    expect(keys.size).toBe(10);
  });
});
