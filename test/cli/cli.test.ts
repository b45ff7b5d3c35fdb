// The real CLI as a child process (`node bin/catraca.js …`) against the run's PostgreSQL and NATS.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from 'nats';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { decodeJson } from '../../src/bus/messages.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { migrate } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/pool.ts';
import { seedCatalog } from '../../src/stack/seed.ts';
import { cli, ROOT } from '../helpers/cli.ts';

// Each test runs the CLI as child processes (one tsx start each, ~2 s alone); under the load of the
// other test files beside it (CI runs four at once on two cores) one start has taken 15 s, so a test
// of several CLI runs has a longer budget than the suite's 30 s.
vi.setConfig({ testTimeout: 180_000 });

let db: pg.Pool;
beforeAll(async () => {
  db = createPool(process.env.DATABASE_URL!, 2);
  await seedCatalog(db); // sim/echo, sim/lorem
});
afterAll(async () => {
  await db.end();
});

async function newTenant(name = `cli-${randomBytes(3).toString('hex')}`): Promise<string> {
  const r = await cli(['tenant', 'create', '--name', name, '--json']);
  expect(r.code).toBe(0);
  return r.json.id;
}

describe.concurrent('tenant create', () => {
  test('creates a tenant and prints exactly {id, name}', async () => {
    const r = await cli(['tenant', 'create', '--name', 'Padaria Pão Quente', '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(r.json).toEqual({ id: expect.stringMatching(/^ten_[a-z0-9]+$/), name: 'Padaria Pão Quente' });
    const { rows } = await db.query('select name, balance_micros, held_micros from tenants where id = $1', [r.json.id]);
    expect(rows).toEqual([{ name: 'Padaria Pão Quente', balance_micros: 0n, held_micros: 0n }]);
  });

  test('without --json prints a human line', async () => {
    const r = await cli(['tenant', 'create', '--name', 'Humana']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^created tenant ten_[a-z0-9]+ \(Humana\)\n$/);
  });
});

describe.concurrent('key create', () => {
  test('models \'*\' → "*"; the database keeps only the SHA-256 of the key', async () => {
    const tenant = await newTenant();
    const r = await cli(['key', 'create', '--tenant', tenant, '--label', 'agente-1', '--models', '*', '--json']);
    expect(r.code).toBe(0);
    expect(Object.keys(r.json).sort()).toEqual(['data_country', 'expires_at', 'id', 'key', 'label', 'models']);
    expect(r.json.expires_at).toBeNull();
    expect(r.json.id).toMatch(/^key_[a-z0-9]+$/);
    expect(r.json.key).toMatch(/^sk-cat-v1-[0-9a-f]{64}$/);
    expect(r.json.label).toBe('agente-1');
    expect(r.json.models).toBe('*');
    expect(r.stderr).not.toContain(r.json.key);

    const { rows } = await db.query('select * from api_keys where id = $1', [r.json.id]);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(Buffer.compare(row.key_hash, createHash('sha256').update(r.json.key).digest())).toBe(0);
    expect(row.tenant_id).toBe(tenant);
    expect(row.models).toBeNull();
    expect(row.limit_micros).toBeNull();
    // the plain key is nowhere in the row
    const serialized = JSON.stringify(row, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    expect(serialized).not.toContain(r.json.key.slice('sk-cat-v1-'.length));
  });

  test('allowlist, limit, reset and rate limit are stored exactly', async () => {
    const tenant = await newTenant();
    const r = await cli([
      'key',
      'create',
      '--tenant',
      tenant,
      '--label',
      'allowlisted',
      '--models',
      'sim/echo,sim/lorem',
      '--limit',
      '5.50',
      '--limit-reset',
      'daily',
      '--rate-limit',
      '100/1m',
      '--json',
    ]);
    expect(r.code).toBe(0);
    expect(r.json).toEqual({
      id: expect.stringMatching(/^key_/),
      key: expect.stringMatching(/^sk-cat-v1-[0-9a-f]{64}$/),
      label: 'allowlisted',
      models: ['sim/echo', 'sim/lorem'],
      expires_at: null,
      data_country: null,
    });
    const { rows } = await db.query(
      'select models, limit_micros, limit_reset, rate_limit_requests, rate_limit_interval_s, is_demo from api_keys where id = $1',
      [r.json.id],
    );
    expect(rows).toEqual([
      {
        models: ['sim/echo', 'sim/lorem'],
        limit_micros: 5_500_000n,
        limit_reset: 'daily',
        rate_limit_requests: 100,
        rate_limit_interval_s: 60,
        is_demo: false,
      },
    ]);
  });

  test('an unknown model in the allowlist is refused (exit 1) and no key is created', async () => {
    const tenant = await newTenant();
    const r = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--models', 'sim/echo,acme/ghost', '--json']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('unknown model(s): acme/ghost');
    const { rows } = await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant]);
    expect(rows[0].n).toBe(0);
  });
});

describe.concurrent('key create --expires, key list', () => {
  test('--expires 30d and an ISO date are stored; a past, malformed or too distant expiry is exit 2', async () => {
    const tenant = await newTenant();
    const before = Date.now();
    const r = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--expires', '30d', '--json']);
    expect(r.code).toBe(0);
    const at = Date.parse(r.json.expires_at);
    expect(at).toBeGreaterThanOrEqual(before + 30 * 86400_000);
    expect(at).toBeLessThanOrEqual(Date.now() + 30 * 86400_000);
    const { rows } = await db.query('select expires_at from api_keys where id = $1', [r.json.id]);
    expect((rows[0].expires_at as Date).toISOString()).toBe(r.json.expires_at);

    const year = new Date().getUTCFullYear() + 1;
    const iso = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--expires', `${year}-06-30`, '--json']);
    expect(iso.json.expires_at).toBe(`${year}-06-30T00:00:00.000Z`);
    const zoned = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--expires', `${year}-06-30T20:00:00-03:00`]);
    expect(zoned.stdout).toContain(`  expires: ${year}-06-30T23:00:00.000Z\n`);

    const refused = [
      ['2020-01-01', 'is not in the future'],
      [`${year}-02-30`, 'is not a calendar date'],
      [`${year}-06-30T20:00:00`, 'a time needs its zone'],
      ['soon', 'is neither a duration like 30d'],
      ['4000d', 'more than 10 years away'],
    ];
    const results = await Promise.all(refused.map(([value]) => cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--expires', value, '--json'])));
    results.forEach((bad, i) => {
      expect([bad.code, bad.stdout]).toEqual([2, '']);
      expect(bad.stderr).toContain(`key create: --expires must be a duration like 30d, 12h, 2w or an ISO date like 2026-12-31: `);
      expect(bad.stderr).toContain(refused[i][1]);
    });
    const { rows: n } = await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant]);
    expect(n[0].n).toBe(3);
  }, 180_000);

  test('key list shows id, label, hint, models, limits, expiry and revocation, never the key', async () => {
    const tenant = await newTenant();
    const a = await cli([
      'key',
      'create',
      '--tenant',
      tenant,
      '--label',
      'bot',
      '--models',
      'sim/echo',
      '--limit',
      '5',
      '--limit-reset',
      'weekly',
      '--rate-limit',
      '100/1m',
      '--expires',
      '7d',
      '--json',
    ]);
    const b = await cli(['key', 'create', '--tenant', tenant, '--label', 'old', '--json']);
    await cli(['key', 'revoke', '--id', b.json.id, '--json']);
    const r = await cli(['key', 'list', '--tenant', tenant, '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(r.stdout).not.toContain(a.json.key);
    expect(r.stdout).not.toContain(b.json.key);
    expect(r.stdout).not.toContain(a.json.key.slice(14, 60)); // nor any long piece of it
    expect(r.json.tenant).toBe(tenant);
    const byId = Object.fromEntries(r.json.keys.map((k: { id: string }) => [k.id, k]));
    expect(byId[a.json.id]).toEqual({
      id: a.json.id,
      label: 'bot',
      hint: `${a.json.key.slice(0, 14)}…${a.json.key.slice(-4)}`,
      models: ['sim/echo'],
      limit: '5.00',
      limit_reset: 'weekly',
      rate_limit: '100/1m',
      expires_at: a.json.expires_at,
      expired: false,
      revoked: false,
      revoked_at: null,
      usage: '0.00',
      created_at: expect.any(String),
      last_used_at: null,
    });
    expect(byId[b.json.id]).toMatchObject({
      label: 'old',
      models: '*',
      limit: null,
      rate_limit: null,
      expires_at: null,
      revoked: true,
      revoked_at: expect.any(String),
    });

    const human = await cli(['key', 'list', '--tenant', tenant]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^ID +LABEL +HINT +MODELS +LIMIT +RATE +EXPIRES +STATUS\n/);
    expect(human.stdout).toMatch(new RegExp(`${a.json.id} +bot +sk-cat-v1-.{4}….{4} +sim/echo +5\\.00/weekly +100/1m +\\d{4}-.+Z +active`));
    expect(human.stdout).toMatch(new RegExp(`${b.json.id} +old .* revoked\n`));
    expect(human.stdout).not.toContain(a.json.key);

    const unknown = await cli(['key', 'list', '--tenant', 'ten_nobody', '--json']);
    expect([unknown.code, unknown.stdout, unknown.stderr]).toEqual([1, '', 'catraca: no tenant with id "ten_nobody"\n']);
    expect((await cli(['key', 'list', '--json'])).stderr).toContain('key list: --tenant is required');
  }, 180_000);
});

describe.concurrent('tenant list, model list', () => {
  test('tenant list shows balances and live keys as one JSON object', async () => {
    const tenant = await newTenant('Listada');
    await cli(['credits', 'grant', '--tenant', tenant, '--amount', '2.5', '--json']);
    await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--json']);
    const r = await cli(['tenant', 'list', '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(r.json.tenants.find((t: { id: string }) => t.id === tenant)).toEqual({
      id: tenant,
      name: 'Listada',
      balance: '2.50',
      held: '0.00',
      active_keys: 1,
      created_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
    });
    const human = await cli(['tenant', 'list']);
    expect(human.stdout).toMatch(new RegExp(`${tenant} +Listada +2\\.50 +0\\.00 +1 `));
  }, 180_000); // five CLI processes in a row, under the load of the other test files

  test('model list shows the catalog with exact prices', async () => {
    const r = await cli(['model', 'list', '--json']);
    expect(r.code).toBe(0);
    expect(r.json.models.find((m: { id: string }) => m.id === 'sim/echo')).toEqual({
      id: 'sim/echo',
      pool: 'sim',
      protocol: 'sim',
      upstream_model: 'echo',
      base_url: null,
      api_key_env: null,
      input_price: '1.00',
      output_price: '2.00',
      cached_input_price: null,
      cache_write_price: null,
      cache_write_1h_price: null,
      batch_input_price: null,
      batch_output_price: null,
      batch_cached_input_price: null,
      batch_cache_write_price: null,
      batch_cache_write_1h_price: null,
      batch_mode: 'queue',
      max_output_tokens: 4096,
      context_length: expect.any(Number),
      context_length_set: expect.any(Boolean),
      input_modalities: ['text'],
      image_input_tokens: null,
      extra_params: [],
      kind: 'chat',
      legacy_completions: false,
      reasoning: false,
      weight: 1,
    });
    const human = await cli(['model', 'list']);
    expect(human.stdout).toMatch(/\nsim\/echo +sim +sim +echo +1\.00 +2\.00 +4096 /);
  });
});

describe.concurrent('--version and --help', () => {
  test('--version prints the version of package.json', async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    expect(await cli(['--version'])).toMatchObject({ code: 0, stdout: `${version}\n` });
    expect((await cli(['--version', '--json'])).json).toEqual({ version });
  });

  test.each([
    'tenant create',
    'tenant list',
    'key create',
    'key list',
    'key revoke',
    'credits grant',
    'model set',
    'model list',
    'model alias add',
    'model alias list',
    'model alias remove',
    'ledger check',
    'status',
    'pix pay',
  ])("%s --help prints that command's usage (exit 0, no database needed)", async (cmd) => {
    for (const flag of ['--help', '-h']) {
      const r = await cli([...cmd.split(' '), flag], { DATABASE_URL: undefined, NATS_URL: undefined }, tmpdir());
      expect(r.code).toBe(0);
      expect(r.stdout.startsWith(`Usage: catraca ${cmd} `)).toBe(true);
      expect(r.stdout).toContain('Exit codes: 0 success, 1 failure, 2 usage error.');
      expect(r.stderr).toBe('');
    }
  });

  test('key create --help documents --expires and the amounts rule', async () => {
    const r = await cli(['key', 'create', '--help']);
    expect(r.stdout).toContain('[--expires 30d|12h|2w|2026-12-31|2026-12-31T23:59:59Z]');
    expect(r.stdout).toContain('Thousands separators are refused');
  });
});

describe.concurrent('credits grant', () => {
  test('prints the exact balance as a decimal string', async () => {
    const tenant = await newTenant();
    const a = await cli(['credits', 'grant', '--tenant', tenant, '--amount', '12.34', '--note', 'boas-vindas', '--json']);
    expect(a.code).toBe(0);
    expect(a.json).toEqual({ tenant, balance: '12.34' });
    const b = await cli(['credits', 'grant', '--tenant', tenant, '--amount', '100.000001', '--json']);
    expect(b.json).toEqual({ tenant, balance: '112.340001' });
    const { rows } = await db.query(`select kind, amount_micros, balance_after_micros, source, note from ledger where tenant_id = $1 order by id`, [tenant]);
    expect(rows).toEqual([
      { kind: 'credit', amount_micros: 12_340_000n, balance_after_micros: 12_340_000n, source: 'grant', note: 'boas-vindas' },
      { kind: 'credit', amount_micros: 100_000_001n, balance_after_micros: 112_340_001n, source: 'grant', note: null },
    ]);
  });

  test('--external-id grants at most once', async () => {
    const tenant = await newTenant();
    const ext = `test:${randomBytes(4).toString('hex')}`;
    expect((await cli(['credits', 'grant', '--tenant', tenant, '--amount', '7', '--external-id', ext, '--json'])).json).toEqual({ tenant, balance: '7.00' });
    expect((await cli(['credits', 'grant', '--tenant', tenant, '--amount', '7', '--external-id', ext, '--json'])).json).toEqual({
      tenant,
      balance: '7.00',
      duplicate: true,
    });
  });
});

describe.concurrent('amounts refuse thousands separators', () => {
  test('--amount "1.000,00", "1,000.00", "1 000", "1.000", "1,500" → exit 2 with a message, nothing granted', async () => {
    const tenant = await newTenant();
    for (const [amount, message] of [
      ['1.000,00', '"1.000,00" has more than one separator or a space; write amounts without thousands separators'],
      ['1,000.00', '"1,000.00" has more than one separator or a space'],
      ['1 000', '"1 000" has more than one separator or a space'],
      [
        '1.000',
        '"1.000" is ambiguous: a dot followed by exactly three digits reads as a thousands separator in pt-BR and as a decimal separator in en-US; write 1000 for the thousands, or 1.0000 for the decimals',
      ],
      ['1,500', '"1,500" is ambiguous: a comma followed by exactly three digits'],
    ]) {
      const r = await cli(['credits', 'grant', '--tenant', tenant, '--amount', amount, '--json']);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(`credits grant: --amount must be a BRL amount like 12.34: ${message}`);
    }
    const { rows } = await db.query('select count(*)::int as n from ledger where tenant_id = $1', [tenant]);
    expect(rows[0].n).toBe(0);
    // Plain decimals, with a dot or a comma, are exact.
    expect((await cli(['credits', 'grant', '--tenant', tenant, '--amount', '1,5', '--json'])).json).toEqual({ tenant, balance: '1.50' });
    expect((await cli(['credits', 'grant', '--tenant', tenant, '--amount', '1000.0001', '--json'])).json).toEqual({ tenant, balance: '1001.5001' });
    expect((await cli(['credits', 'grant', '--tenant', tenant, '--amount', '0.125', '--json'])).json).toEqual({ tenant, balance: '1001.6251' });
  }, 90000);

  test('--limit and prices follow the same rule', async () => {
    const tenant = await newTenant();
    const limit = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--limit', '1.000', '--json']);
    expect(limit.code).toBe(2);
    expect(limit.stderr).toContain('key create: --limit must be a BRL amount like 12.34: "1.000" is ambiguous');
    expect((await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant])).rows[0].n).toBe(0);
    const id = `acme/thousands-${randomBytes(3).toString('hex')}`;
    const price = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1.250', '--output-price', '2', '--json']);
    expect(price.code).toBe(2);
    expect(price.stderr).toContain('model set: --input-price must be a BRL amount like 12.34: "1.250" is ambiguous');
    const grouped = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '1.000,50', '--json']);
    expect(grouped.code).toBe(2);
    expect((await db.query('select count(*)::int as n from models where id = $1', [id])).rows[0].n).toBe(0);
    const fine = await cli([
      'model',
      'set',
      '--id',
      id,
      '--pool',
      'openai',
      '--input-price',
      '1,2500',
      '--output-price',
      '0.825',
      '--context-length',
      '128000',
      '--json',
    ]);
    expect(fine.code).toBe(0);
    expect(fine.json).toMatchObject({ input_price: '1.25', output_price: '0.825' });
  });

  test('--help states the rule', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Thousands separators are refused ("1.000,00",');
    expect(r.stdout).toContain('"1.500" is 1500 in pt-BR and 1.5 in en-US, so write 1500 or 1.5 / 1.5000');
  });
});

describe.concurrent('model alias', () => {
  test('add, list and remove; an alias never hides a model id and must name a model', { timeout: 90_000 }, async () => {
    const alias = `claude-sonnet-${randomBytes(3).toString('hex')}`;
    const added = await cli(['model', 'alias', 'add', '--alias', alias, '--model', 'sim/echo', '--json']);
    expect([added.code, added.json]).toEqual([0, { alias, model: 'sim/echo' }]);
    const listed = await cli(['model', 'alias', 'list', '--json']);
    expect(listed.json.aliases).toContainEqual({ alias, model: 'sim/echo' });
    const moved = await cli(['model', 'alias', 'add', '--alias', alias, '--model', 'sim/lorem', '--json']);
    expect(moved.json).toEqual({ alias, model: 'sim/lorem' });
    const hiding = await cli(['model', 'alias', 'add', '--alias', 'sim/echo', '--model', 'sim/lorem', '--json']);
    expect([hiding.code, hiding.stderr]).toEqual([1, expect.stringContaining("sim/echo is a catalog model's id")]);
    const nowhere = await cli(['model', 'alias', 'add', '--alias', `${alias}-x`, '--model', 'acme/ghost', '--json']);
    expect([nowhere.code, nowhere.stderr]).toEqual([1, expect.stringContaining('unknown model acme/ghost')]);
    const removed = await cli(['model', 'alias', 'remove', '--alias', alias, '--json']);
    expect(removed.json).toEqual({ alias, removed: true });
    const again = await cli(['model', 'alias', 'remove', '--alias', alias, '--json']);
    expect([again.code, again.stderr]).toEqual([1, expect.stringContaining(`no alias "${alias}"`)]);
  });
});

describe.concurrent('model set', () => {
  test('creates and updates a model; prices are exact decimal strings', async () => {
    const id = `acme/m-${randomBytes(3).toString('hex')}`;
    const r = await cli([
      'model',
      'set',
      '--id',
      id,
      '--pool',
      'openai',
      '--upstream-model',
      'gpt-4o-mini',
      '--base-url',
      'https://api.openai.com/v1',
      '--api-key-env',
      'OPENAI_API_KEY',
      '--input-price',
      '0.825',
      '--output-price',
      '3.300000',
      '--max-output-tokens',
      '16384',
      '--context-length',
      '128000',
      '--json',
    ]);
    expect(r.code).toBe(0);
    expect(r.json).toEqual({
      id,
      pool: 'openai',
      upstream_model: 'gpt-4o-mini',
      base_url: 'https://api.openai.com/v1',
      api_key_env: 'OPENAI_API_KEY',
      input_price: '0.825',
      output_price: '3.30',
      cached_input_price: null,
      cache_write_price: null,
      cache_write_1h_price: null,
      batch_input_price: null,
      batch_output_price: null,
      batch_cached_input_price: null,
      batch_cache_write_price: null,
      batch_cache_write_1h_price: null,
      batch_mode: 'queue',
      max_output_tokens: 16384,
      context_length: 128000,
      context_length_set: true,
      protocol: 'openai',
      kind: 'chat',
      input_modalities: ['text'],
      image_input_tokens: null,
      extra_params: [],
      legacy_completions: false,
      reasoning: false,
      weight: 1,
    });
    const { rows } = await db.query('select input_price, output_price, max_output_tokens from models where id = $1', [id]);
    expect(rows).toEqual([{ input_price: 825_000n, output_price: 3_300_000n, max_output_tokens: 16384 }]);

    // Update: options not given keep their values.
    const u = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--json']);
    expect(u.json).toEqual({ ...r.json, input_price: '1.00', output_price: '4.00' });
    // What the model accepts and its worst case per image.
    const v = await cli([
      'model',
      'set',
      '--id',
      id,
      '--pool',
      'openai',
      '--input-price',
      '1',
      '--output-price',
      '4',
      '--modalities',
      'text,image',
      '--image-tokens',
      '25600',
      '--extra-params',
      'top_k',
      '--json',
    ]);
    expect(v.json).toEqual({ ...u.json, input_modalities: ['text', 'image'], image_input_tokens: 25600, extra_params: ['top_k'] });
    const bad = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--modalities', 'image', '--json']);
    expect([bad.code, bad.stderr.trim()]).toEqual([
      2,
      'catraca: model set: --modalities is a list of text, image, audio, file that includes text\nRun `catraca model set --help` for usage.',
    ]);
  });

  test('kind, legacy completions and prompt-cache prices: set, kept when not given, cleared with none', { timeout: 90_000 }, async () => {
    const id = `acme/k-${randomBytes(3).toString('hex')}`;
    const v = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--context-length', '8192', '--json']);
    expect(v.code).toBe(0);
    expect([v.json.context_length, v.json.context_length_set]).toEqual([8192, true]);
    // An embedding model with the vendor's own legacy endpoint flag, kept by later updates.
    const e = await cli([
      'model',
      'set',
      '--id',
      id,
      '--pool',
      'openai',
      '--input-price',
      '1',
      '--output-price',
      '4',
      '--kind',
      'embedding',
      '--legacy-completions',
      'true',
      '--json',
    ]);
    expect(e.json).toEqual({ ...v.json, kind: 'embedding', legacy_completions: true });
    const kept = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--json']);
    expect([kept.json.kind, kept.json.legacy_completions]).toEqual(['embedding', true]);
    // Prompt-cache prices: set, kept when not given, cleared with none.
    const cache = ['--cached-input-price', '0.10', '--cache-write-price', '1.25', '--cache-write-1h-price', '2'];
    const c = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', ...cache, '--json']);
    expect([c.json.cached_input_price, c.json.cache_write_price, c.json.cache_write_1h_price]).toEqual(['0.10', '1.25', '2.00']);
    const cleared = await cli([
      'model',
      'set',
      '--id',
      id,
      '--pool',
      'openai',
      '--input-price',
      '1',
      '--output-price',
      '4',
      '--cache-write-1h-price',
      'none',
      '--json',
    ]);
    expect([cleared.json.cached_input_price, cleared.json.cache_write_price, cleared.json.cache_write_1h_price]).toEqual(['0.10', '1.25', null]);
    const wrongKind = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--kind', 'vision', '--json']);
    expect([wrongKind.code, wrongKind.stderr]).toEqual([2, expect.stringContaining('model set: --kind must be one of chat, embedding')]);
    // an embedding model (kind kept) moved to an Anthropic-protocol pool: Anthropic has no embeddings API
    const noEmbeddings = await cli(['model', 'set', '--id', id, '--pool', 'anthropic', '--input-price', '1', '--output-price', '4', '--json']);
    expect([noEmbeddings.code, noEmbeddings.stderr]).toEqual([
      2,
      expect.stringContaining('model set: a model of kind embedding needs a vendor protocol with an embeddings API (sim or openai), not anthropic'),
    ]);
  });

  test('a new model needs --context-length (the prompt bound is capped by it); an update keeps it', async () => {
    const id = `acme/ctx-${randomBytes(3).toString('hex')}`;
    const missing = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '2', '--json']);
    expect([missing.code, missing.stderr]).toEqual([2, expect.stringContaining('model set: --context-length is required for a new model')]);
    expect((await db.query('select count(*)::int as n from models where id = $1', [id])).rows[0].n).toBe(0);
    expect(
      (await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '2', '--context-length', '1000000', '--json'])).code,
    ).toBe(0);
    const update = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '2', '--output-price', '2', '--json']);
    expect([update.code, update.json.context_length, update.json.context_length_set]).toEqual([0, 1_000_000, true]);
  });

  test('rejects more than 6 decimals, floats in exponent form and secrets in --api-key-env (exit 2)', async () => {
    const id = 'acme/bad';
    for (const [flag, value, message] of [
      ['--input-price', '0.0000001', '--input-price must be a BRL amount'],
      ['--input-price', '1e-3', '--input-price must be a BRL amount'],
      ['--api-key-env', 'sk-live-123', '--api-key-env is the NAME of an environment variable'],
    ]) {
      const args = ['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '2', '--json'];
      const i = args.indexOf(flag);
      if (i >= 0) args[i + 1] = value;
      else args.push(flag, value);
      const r = await cli(args);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(message);
    }
    const { rows } = await db.query('select count(*)::int as n from models where id = $1', [id]);
    expect(rows[0].n).toBe(0);
  });
});

describe.concurrent('key revoke', () => {
  let nc: NatsConnection;
  beforeAll(async () => {
    nc = await connect({ servers: process.env.NATS_URL! });
  });
  afterAll(async () => {
    await nc.close();
  });

  test('revokes in the database and broadcasts {key_id} on NATS', async () => {
    const tenant = await newTenant();
    const created = await cli(['key', 'create', '--label', 'test', '--tenant', tenant, '--json']);
    const keyId = created.json.id;
    const sub = nc.subscribe(subjects.keyInvalidated);
    const received: unknown[] = [];
    const got = (async () => {
      for await (const m of sub) {
        const msg = decodeJson(m.data) as { key_id: string };
        received.push(msg);
        if (msg.key_id === keyId) break;
      }
    })();
    await nc.flush();
    const r = await cli(['key', 'revoke', '--id', keyId, '--json']);
    expect(r.code).toBe(0);
    expect(r.json).toEqual({ id: keyId, revoked: true });
    await Promise.race([got, new Promise((_, rej) => setTimeout(() => rej(new Error('no invalidation on NATS')), 5000))]);
    sub.unsubscribe();
    expect(received.filter((m) => (m as { key_id: string }).key_id === keyId)).toEqual([{ key_id: keyId }]);
    const { rows } = await db.query('select revoked_at is not null as revoked from api_keys where id = $1', [keyId]);
    expect(rows).toEqual([{ revoked: true }]);
  });

  test('an unknown key id fails with exit 1', async () => {
    const r = await cli(['key', 'revoke', '--id', 'key_doesnotexist', '--json']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('catraca: no key with id "key_doesnotexist"\n');
  });
});

describe.concurrent('usage errors', () => {
  test.each([
    [['credits', 'grant', '--tenant', 'ten_x', '--amount', '1.1234567', '--json'], '--amount must be a BRL amount like 12.34'],
    [['credits', 'grant', '--tenant', 'ten_x', '--amount', '-5', '--json'], '--amount must be a BRL amount'],
    [['credits', 'grant', '--amount', '5', '--json'], 'credits grant: --tenant is required'],
    [['key', 'create', '--label', 'test', '--tenant', 'ten_x', '--rate-limit', 'lots', '--json'], '--rate-limit must look like 60/60s'],
    [
      ['key', 'create', '--label', 'test', '--tenant', 'ten_x', '--limit-reset', 'hourly', '--limit', '1', '--json'],
      '--limit-reset must be daily, weekly or monthly',
    ],
    [['key', 'create', '--tenant', 'ten_x', '--json'], 'key create: --label must be 1 to 100 characters'],
    [['key', 'create', '--label', 'x'.repeat(101), '--tenant', 'ten_x', '--json'], 'key create: --label must be 1 to 100 characters'],
    [['key', 'create', '--label', 'test', '--tenant', 'ten_x', '--limit', '0.001', '--json'], 'key create: --limit must be a BRL amount like 12.34'],
    [['key', 'create', '--label', 'test', '--tenant', 'ten_x', '--limit-reset', 'daily', '--json'], 'key create: --limit-reset needs a limit'],
    [['tenant', 'create', '--name', 'x', '--colour', 'blue', '--json'], 'tenant create: unknown option --colour'],
    [['tenant', 'destroy', '--json'], 'unknown command "tenant destroy"'],
    [['tenant', 'create', '--name', '--json'], 'tenant create: --name needs a value'],
    [['tenant', 'create', '--name'], 'tenant create: --name needs a value'],
    [['tenant', 'create', '--name', 'a', '--name', 'b'], 'tenant create: --name given twice'],
    [['tenant', 'create', '--name', 'a', 'stray'], 'tenant create: unexpected argument "stray"'],
    [['tenant', 'create', '--name', 'a', '--json=yes'], 'tenant create: --json takes no value'],
    [['tenant', 'list', '-x'], 'tenant list: unknown option -x'],
  ])('%j → exit 2', async (args, message) => {
    const r = await cli(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(message);
  });

  test('an unknown tenant is a failure (exit 1), not a usage error', async () => {
    const r = await cli(['credits', 'grant', '--tenant', 'ten_nobody', '--amount', '1', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('catraca: no tenant with id "ten_nobody"\n');
  });
});

describe.concurrent('connection resolution', () => {
  test('without DATABASE_URL it uses .catraca/stack.json of the checkout, found from a subdirectory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'catraca-cli-'));
    try {
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'catraca' }));
      mkdirSync(join(dir, '.catraca'));
      mkdirSync(join(dir, 'a', 'b'), { recursive: true });
      writeFileSync(
        join(dir, '.catraca', 'stack.json'),
        JSON.stringify({
          database_url: process.env.DATABASE_URL,
          nats_url: process.env.NATS_URL,
          base_url: 'http://127.0.0.1:1/v1',
          portal_url: null,
          pid: process.pid,
          started_at: new Date().toISOString(),
        }),
      );
      const r = await cli(['tenant', 'create', '--name', 'via-state', '--json'], { DATABASE_URL: undefined, NATS_URL: undefined }, join(dir, 'a', 'b'));
      expect(r.code).toBe(0);
      expect(r.json.name).toBe('via-state');

      rmSync(join(dir, '.catraca', 'stack.json'));
      const none = await cli(['tenant', 'create', '--name', 'nowhere', '--json'], { DATABASE_URL: undefined, NATS_URL: undefined }, join(dir, 'a'));
      expect(none.code).toBe(1);
      expect(none.stderr).toBe(
        'catraca: no database to talk to: start the stack with `npm start` in this checkout (in another terminal), or set DATABASE_URL\n',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.concurrent('ledger check', () => {
  // A database of its own, so the exact result does not depend on other test files.
  const name = `${new URL(process.env.DATABASE_URL!).pathname.slice(1)}_ledger`;
  const url = (() => {
    const u = new URL(process.env.DATABASE_URL!);
    u.pathname = `/${name}`;
    return u.toString();
  })();
  let ldb: pg.Pool;
  beforeAll(async () => {
    await migrate(url);
    ldb = createPool(url, 2);
  });
  afterAll(async () => {
    await ldb.end();
    const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await admin.connect();
    await admin.query(`drop database if exists "${name}" with (force)`);
    await admin.end();
  });

  test('passes on a consistent ledger and fails (exit 1) on a tampered tenant', async () => {
    const env = { DATABASE_URL: url };
    const t1 = (await cli(['tenant', 'create', '--name', 'one', '--json'], env)).json.id;
    const t2 = (await cli(['tenant', 'create', '--name', 'two', '--json'], env)).json.id;
    await cli(['credits', 'grant', '--tenant', t1, '--amount', '10', '--json'], env);
    await cli(['credits', 'grant', '--tenant', t2, '--amount', '3.5', '--json'], env);
    await ldb.query(`select * from catraca_settle('req-1', $1, null, 1234, 'sim/echo', 10, 20, false, 'completed', now(), null)`, [t1]);

    const ok = await cli(['ledger', 'check', '--json'], env);
    expect(ok.code).toBe(0);
    expect(ok.json).toEqual({ ok: true, tenants_checked: 2, mismatches: [] });
    const human = await cli(['ledger', 'check'], env);
    expect(human.stdout).toBe('ledger OK: 2 tenant(s) checked, balances match the ledger\n');

    // Tamper with one tenant: a balance that the ledger does not explain.
    await ldb.query('update tenants set balance_micros = balance_micros + 1000000 where id = $1', [t2]);
    const bad = await cli(['ledger', 'check', '--json'], env);
    expect(bad.code).toBe(1);
    expect(bad.json).toEqual({
      ok: false,
      tenants_checked: 2,
      mismatches: [
        { tenant: t2, check: 'balance', expected: '3.500000', actual: '4.500000' },
        { tenant: t2, check: 'balance_after', expected: '3.500000', actual: '4.500000' },
      ],
    });
    const scoped = await cli(['ledger', 'check', '--tenant', t1, '--json'], env);
    expect(scoped.json).toEqual({ ok: true, tenants_checked: 1, mismatches: [] });
    await ldb.query('update tenants set held_micros = 5 where id = $1', [t1]);
    const held = await cli(['ledger', 'check', '--tenant', t1, '--json'], env);
    expect(held.code).toBe(1);
    expect(held.json.mismatches).toEqual([{ tenant: t1, check: 'held', expected: '0.000000', actual: '0.000005' }]);
  });
});
