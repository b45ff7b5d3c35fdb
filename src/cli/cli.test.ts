// The real CLI as a child process (`node bin/catraca.js …`) against the run's PostgreSQL and NATS.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from 'nats';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { decodeJson } from '../bus/messages.ts';
import { subjects } from '../bus/subjects.ts';
import { migrate } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { seedCatalog } from '../stack/seed.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(ROOT, 'bin', 'catraca.js');

interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  json: any;
}

function cli(args: string[], env: Record<string, string | undefined> = {}, cwd = ROOT): Promise<CliResult> {
  const base: Record<string, string | undefined> = { ...process.env, DATABASE_URL: process.env.DATABASE_URL, NATS_URL: process.env.NATS_URL };
  const merged = { ...base, ...env };
  for (const k of Object.keys(merged)) if (merged[k] === undefined) delete merged[k];
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env: merged as NodeJS.ProcessEnv, timeout: 20000 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      let json: unknown;
      try {
        json = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        json = undefined;
      }
      resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr, json });
    });
  });
}

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
  test("models '*' → \"*\"; the database keeps only the SHA-256 of the key", async () => {
    const tenant = await newTenant();
    const r = await cli(['key', 'create', '--tenant', tenant, '--label', 'agente-1', '--models', '*', '--json']);
    expect(r.code).toBe(0);
    expect(Object.keys(r.json).sort()).toEqual(['id', 'key', 'label', 'models']);
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
      'key', 'create', '--tenant', tenant, '--models', 'sim/echo,sim/lorem', '--limit', '5.50', '--limit-reset', 'daily',
      '--rate-limit', '100/1m', '--json',
    ]);
    expect(r.code).toBe(0);
    expect(r.json).toEqual({ id: expect.stringMatching(/^key_/), key: expect.stringMatching(/^sk-cat-v1-[0-9a-f]{64}$/), label: '', models: ['sim/echo', 'sim/lorem'] });
    const { rows } = await db.query(
      'select models, limit_micros, limit_reset, rate_limit_requests, rate_limit_interval_s, is_demo from api_keys where id = $1',
      [r.json.id],
    );
    expect(rows).toEqual([
      { models: ['sim/echo', 'sim/lorem'], limit_micros: 5_500_000n, limit_reset: 'daily', rate_limit_requests: 100, rate_limit_interval_s: 60, is_demo: false },
    ]);
  });

  test('an unknown model in the allowlist is refused (exit 1) and no key is created', async () => {
    const tenant = await newTenant();
    const r = await cli(['key', 'create', '--tenant', tenant, '--models', 'sim/echo,acme/ghost', '--json']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('unknown model(s): acme/ghost');
    const { rows } = await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant]);
    expect(rows[0].n).toBe(0);
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
    const { rows } = await db.query(
      `select kind, amount_micros, balance_after_micros, source, note from ledger where tenant_id = $1 order by id`,
      [tenant],
    );
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

describe.concurrent('model set', () => {
  test('creates and updates a model; prices are exact decimal strings', async () => {
    const id = `acme/m-${randomBytes(3).toString('hex')}`;
    const r = await cli([
      'model', 'set', '--id', id, '--pool', 'openai', '--upstream-model', 'gpt-4o-mini', '--base-url', 'https://api.openai.com/v1',
      '--api-key-env', 'OPENAI_API_KEY', '--input-price', '0.825', '--output-price', '3.300000', '--max-output-tokens', '16384', '--json',
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
      max_output_tokens: 16384,
      context_length: 128000,
    });
    const { rows } = await db.query('select input_price, output_price, max_output_tokens from models where id = $1', [id]);
    expect(rows).toEqual([{ input_price: 825_000n, output_price: 3_300_000n, max_output_tokens: 16384 }]);

    // Update: options not given keep their values.
    const u = await cli(['model', 'set', '--id', id, '--pool', 'openai', '--input-price', '1', '--output-price', '4', '--json']);
    expect(u.json).toEqual({ ...r.json, input_price: '1.00', output_price: '4.00' });
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
    const created = await cli(['key', 'create', '--tenant', tenant, '--json']);
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
    [['key', 'create', '--tenant', 'ten_x', '--rate-limit', 'lots', '--json'], '--rate-limit must look like 60/60s'],
    [['key', 'create', '--tenant', 'ten_x', '--limit-reset', 'hourly', '--limit', '1', '--json'], '--limit-reset must be daily, weekly or monthly'],
    [['tenant', 'create', '--name', 'x', '--colour', 'blue', '--json'], 'tenant create: unknown option --colour'],
    [['tenant', 'destroy', '--json'], 'unknown command "tenant destroy"'],
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
        JSON.stringify({ database_url: process.env.DATABASE_URL, nats_url: process.env.NATS_URL, base_url: 'http://127.0.0.1:1/v1', portal_url: null, pid: process.pid, started_at: new Date().toISOString() }),
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
    await ldb.query(`select * from catraca_settle('req-1', $1, null, 1234, 'sim/echo', 10, 20, false, 'completed', now())`, [t1]);

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
