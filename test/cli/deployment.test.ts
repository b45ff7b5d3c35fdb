// `catraca model deployment add` price overrides, cache prices included, through the real CLI
// (`node bin/catraca.js …` as a child process) and on into the catalog entry billing uses.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { usageCostMicros } from '../../src/billing/money.ts';
import { Catalog } from '../../src/catalog/catalog.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createPool } from '../../src/db/pool.ts';
import { cli } from '../helpers/cli.ts';

let db: pg.Pool;
let modelId: string;
beforeAll(async () => {
  db = createPool(process.env.DATABASE_URL!, 2);
  modelId = `depcli/m-${randomBytes(3).toString('hex')}`;
  // the model's own prices: R$ 3 in, R$ 15 out, R$ 0,30 cached reads, R$ 3,75 and R$ 6 cache writes per 1M tokens
  await upsertModel(db, {
    id: modelId,
    pool: 'anthropic',
    protocol: 'anthropic',
    upstream_model: 'claude-x',
    base_url: 'https://api.anthropic.com/v1',
    input_price: 3_000_000n,
    output_price: 15_000_000n,
    cached_input_price: 300_000n,
    cache_write_price: 3_750_000n,
    cache_write_1h_price: 6_000_000n,
  });
});
afterAll(async () => {
  await db.end();
});

describe('model deployment add: cache price overrides', () => {
  test('--cached-input-price, --cache-write-price, --cache-write-1h-price are stored, shown and billed at', async () => {
    const r = await cli([
      'model',
      'deployment',
      'add',
      '--model',
      modelId,
      '--name',
      'cheaper',
      '--base-url',
      'https://other.example.com/v1',
      '--input-price',
      '2',
      '--cached-input-price',
      '0.2',
      '--cache-write-price',
      '2.5',
      '--cache-write-1h-price',
      '4',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json).toMatchObject({
      model: modelId,
      name: 'cheaper',
      input_price: '2.00',
      output_price: null,
      cached_input_price: '0.20',
      cache_write_price: '2.50',
      cache_write_1h_price: '4.00',
    });
    const { rows } = await db.query(
      'select input_price, output_price, cached_input_price, cache_write_price, cache_write_1h_price from model_deployments where id = $1',
      [r.json.id],
    );
    expect(rows[0]).toEqual({
      input_price: 2_000_000n,
      output_price: null,
      cached_input_price: 200_000n,
      cache_write_price: 2_500_000n,
      cache_write_1h_price: 4_000_000n,
    });

    // the catalog entry billing uses: the override where given, the model's price where not
    const entry = (await new Catalog(db).fetch(modelId))!;
    const d = entry.deployments.find((x) => x.name === 'cheaper')!;
    expect(d.prices).toEqual({ input: 2_000_000n, output: 15_000_000n, cachedInput: 200_000n, cacheWrite: 2_500_000n, cacheWrite1h: 4_000_000n });
    // 1 000 prompt tokens (400 cache reads, 300 five-minute writes, 200 one-hour writes, 100 plain) and 10 output
    const usage = { prompt_tokens: 1000, completion_tokens: 10, cached_tokens: 400, cache_write_tokens: 300, cache_write_1h_tokens: 200 };
    // 100 × 2 + 400 × 0,2 + 300 × 2,5 + 200 × 4 + 10 × 15 = 1 980 micro-BRL
    expect(usageCostMicros(usage, d.prices)).toBe(1_980n);

    const list = await cli(['model', 'deployment', 'list', '--model', modelId, '--json']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.json.deployments).toEqual([
      expect.objectContaining({ id: 'primary', cached_input_price: '0.30', cache_write_price: '3.75', cache_write_1h_price: '6.00' }),
      expect.objectContaining({ name: 'cheaper', cached_input_price: '0.20', cache_write_price: '2.50', cache_write_1h_price: '4.00' }),
    ]);
  });

  test('without them a deployment bills cache tokens at the model’s cache prices', async () => {
    const r = await cli(['model', 'deployment', 'add', '--model', modelId, '--name', 'plain', '--base-url', 'https://plain.example.com/v1', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ cached_input_price: null, cache_write_price: null, cache_write_1h_price: null });
    const entry = (await new Catalog(db).fetch(modelId))!;
    expect(entry.deployments.find((x) => x.name === 'plain')!.prices).toEqual({
      input: 3_000_000n,
      output: 15_000_000n,
      cachedInput: 300_000n,
      cacheWrite: 3_750_000n,
      cacheWrite1h: 6_000_000n,
    });
  });

  test('a cache price that is not a BRL amount is a usage error; nothing stored', async () => {
    const r = await cli([
      'model',
      'deployment',
      'add',
      '--model',
      modelId,
      '--name',
      'bad',
      '--base-url',
      'https://bad.example.com/v1',
      '--cache-write-price',
      'abc',
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--cache-write-price must be a BRL amount');
    expect((await db.query("select count(*)::int as n from model_deployments where model_id = $1 and name = 'bad'", [modelId])).rows[0].n).toBe(0);
  });
});
