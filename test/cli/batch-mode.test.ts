// `--batch vendor|queue|none` of `catraca model set` and `model deployment add` (issue 30, docs/batch.md
// "vendor mode") through the real CLI: stored, kept when not given, shown by `model deployment list`,
// refused when not one of the three; and on into the catalog entry the front door reads.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { vendorDeployment } from '../../src/batch/vendor.ts';
import { Catalog } from '../../src/catalog/catalog.ts';
import { createPool } from '../../src/db/pool.ts';
import { cli } from '../helpers/cli.ts';

let db: pg.Pool;
let modelId: string;
beforeAll(() => {
  db = createPool(process.env.DATABASE_URL!, 2);
  modelId = `batchmode/m-${randomBytes(3).toString('hex')}`;
});
afterAll(async () => {
  await db.end();
});

const modelSet = (...extra: string[]) =>
  cli(['model', 'set', '--id', modelId, '--pool', 'openai', '--input-price', '2', '--output-price', '8', '--context-length', '128000', ...extra, '--json']);

describe('batch mode in the CLI', () => {
  test('model set and deployment add store it (queue by default), keep it, list it; a wrong value is refused', async () => {
    const set = await modelSet();
    expect(set.code, set.stderr).toBe(0);
    expect(set.json.batch_mode).toBe('queue');
    const none = await modelSet('--batch', 'none');
    expect(none.json.batch_mode).toBe('none');
    const kept = await modelSet();
    expect(kept.json.batch_mode).toBe('none');
    const bad = await modelSet('--batch', 'later');
    expect([bad.code, bad.stderr.trim()]).toEqual([
      2,
      'catraca: model set: --batch must be one of vendor, queue, none\nRun `catraca model set --help` for usage.',
    ]);

    const dep = await cli([
      'model',
      'deployment',
      'add',
      '--model',
      modelId,
      '--name',
      'direct',
      '--base-url',
      'https://direct.example.com/v1',
      '--batch',
      'vendor',
      '--json',
    ]);
    expect(dep.code, dep.stderr).toBe(0);
    expect(dep.json).toMatchObject({ name: 'direct', batch_mode: 'vendor' });
    const wrong = await cli(['model', 'deployment', 'add', '--model', modelId, '--name', 'x', '--base-url', 'https://x.example.com/v1', '--batch', 'yes']);
    expect([wrong.code, wrong.stderr.trim()]).toEqual([
      2,
      'catraca: model deployment add: --batch must be one of vendor, queue, none\nRun `catraca model deployment add --help` for usage.',
    ]);

    const list = await cli(['model', 'deployment', 'list', '--model', modelId, '--json']);
    expect(list.json.deployments.map((d: { name: string; batch_mode: string }) => [d.name, d.batch_mode])).toEqual([
      ['primary', 'none'],
      ['direct', 'vendor'],
    ]);
    const table = await cli(['model', 'deployment', 'list', '--model', modelId]);
    expect(table.stdout.split('\n')[0]).toMatch(/ BATCH$/);
    expect(table.stdout).toMatch(/direct .* vendor\n/);

    // the entry a front door reads: the vendor deployment takes the model's batches
    const entry = (await new Catalog(db).fetch(modelId))!;
    expect(entry.deployments.map((d) => [d.name, d.batchMode])).toEqual([
      ['primary', 'none'],
      ['direct', 'vendor'],
    ]);
    expect(vendorDeployment(entry)?.name).toBe('direct');
  });
});
