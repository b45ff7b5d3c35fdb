// `catraca model set` and `model deployment add` batch prices (issue 30) through the real CLI
// (`node bin/catraca.js …` as a child process), and on into the catalog entry a batch line is billed at.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Catalog } from '../../src/catalog/catalog.ts';
import { createPool } from '../../src/db/pool.ts';
import { cli } from '../helpers/cli.ts';

let db: pg.Pool;
let modelId: string;
beforeAll(() => {
  db = createPool(process.env.DATABASE_URL!, 2);
  modelId = `batchcli/m-${randomBytes(3).toString('hex')}`;
});
afterAll(async () => {
  await db.end();
});

const batchColumns = 'select batch_input_price, batch_output_price, batch_cached_input_price, batch_cache_write_price, batch_cache_write_1h_price from';

describe('batch prices in the CLI', () => {
  test('model set and deployment add store, show and price with them; the online prices where none is set', async () => {
    const set = await cli([
      'model',
      'set',
      '--id',
      modelId,
      '--pool',
      'openai',
      '--input-price',
      '2',
      '--output-price',
      '8',
      '--cached-input-price',
      '1',
      '--context-length',
      '128000',
      '--batch-input-price',
      '1',
      '--batch-output-price',
      '4',
      '--json',
    ]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.json).toMatchObject({
      id: modelId,
      input_price: '2.00',
      batch_input_price: '1.00',
      batch_output_price: '4.00',
      batch_cached_input_price: null,
      batch_cache_write_price: null,
      batch_cache_write_1h_price: null,
    });
    expect((await db.query(`${batchColumns} models where id = $1`, [modelId])).rows[0]).toEqual({
      batch_input_price: 1_000_000n,
      batch_output_price: 4_000_000n,
      batch_cached_input_price: null,
      batch_cache_write_price: null,
      batch_cache_write_1h_price: null,
    });

    const dep = await cli([
      'model',
      'deployment',
      'add',
      '--model',
      modelId,
      '--name',
      'other',
      '--base-url',
      'https://other.example.com/v1',
      '--input-price',
      '3',
      '--batch-output-price',
      '3',
      '--batch-cached-input-price',
      '0.25',
      '--json',
    ]);
    expect(dep.code, dep.stderr).toBe(0);
    expect(dep.json).toMatchObject({ name: 'other', batch_input_price: null, batch_output_price: '3.00', batch_cached_input_price: '0.25' });

    // the entry a batch line is billed at: the deployment's batch price, the model's, then the online price
    const entry = (await new Catalog(db).fetch(modelId))!;
    const [primary, other] = entry.deployments;
    expect(primary.prices).toEqual({ input: 2_000_000n, output: 8_000_000n, cachedInput: 1_000_000n });
    expect(primary.batchPrices).toEqual({ input: 1_000_000n, output: 4_000_000n, cachedInput: 1_000_000n });
    expect(other.prices).toEqual({ input: 3_000_000n, output: 8_000_000n, cachedInput: 1_000_000n });
    expect(other.batchPrices).toEqual({ input: 1_000_000n, output: 3_000_000n, cachedInput: 250_000n });

    const list = await cli(['model', 'deployment', 'list', '--model', modelId, '--json']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.json.deployments).toEqual([
      expect.objectContaining({ id: 'primary', batch_input_price: '1.00', batch_output_price: '4.00' }),
      expect.objectContaining({ name: 'other', batch_input_price: null, batch_output_price: '3.00', batch_cached_input_price: '0.25' }),
    ]);
  });

  test('model set keeps batch prices not given, and none clears one', async () => {
    const again = await cli(['model', 'set', '--id', modelId, '--pool', 'openai', '--input-price', '2', '--output-price', '8', '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.json).toMatchObject({ batch_input_price: '1.00', batch_output_price: '4.00' });
    const cleared = await cli([
      'model',
      'set',
      '--id',
      modelId,
      '--pool',
      'openai',
      '--input-price',
      '2',
      '--output-price',
      '8',
      '--batch-input-price',
      'none',
      '--json',
    ]);
    expect(cleared.code, cleared.stderr).toBe(0);
    expect(cleared.json).toMatchObject({ batch_input_price: null, batch_output_price: '4.00' });
    const entry = (await new Catalog(db).fetch(modelId))!;
    expect(entry.deployments[0].batchPrices).toEqual({ input: 2_000_000n, output: 4_000_000n, cachedInput: 1_000_000n });
  });
});
