import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockAzure, startMockAzure } from '../bench/mock-upstream/azure.ts';
import { upsertModel } from '../src/db/models.ts';
import { cli } from './helpers/cli.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Data kept in Brazil, on request: deployments say where they run (`model deployment add --region
// --country BR`), a key is restricted to a country (`key create --data-country BR`); its requests go
// only to deployments there, and are refused (403 data_residency_unavailable) when none is
// available while foreign ones are healthy: never sent abroad. Against a mock Azure resource whose
// deployments stand for resources in two countries.

const KEY = 'azkey-residency-0123456789abcdef0123';
let stack: TestStack;
let azure: MockAzure;

beforeAll(async () => {
  azure = await startMockAzure({ apiKey: KEY, deployments: { 'gpt-eastus': 'mock-gpt', 'gpt-brazilsouth': 'mock-gpt', 'busy-brazilsouth': 'mock-429' } });
  stack = await startStack({ gateways: 1, workers: 1, env: { AZURE_RES_KEY: KEY, WORKER_UPSTREAM_KEYS: 'AZURE_RES_KEY' } });
  const model = (id: string) =>
    upsertModel(stack.db, {
      id,
      pool: 'openai',
      protocol: 'azure',
      upstream_model: 'gpt-eastus',
      base_url: azure.url,
      api_key_env: 'AZURE_RES_KEY',
      input_price: 2_000_000n,
      output_price: 8_000_000n,
      context_length: 128_000,
      weight: 1000, // the foreign primary would be everyone else's first choice
    });
  await model('residency/gpt');
  await model('residency/down');
  await model('residency/abroad');
  for (const [id, upstream] of [
    ['residency/gpt', 'gpt-brazilsouth'],
    ['residency/down', 'busy-brazilsouth'],
  ] as const) {
    const r = await cli([
      'model',
      'deployment',
      'add',
      '--model',
      id,
      '--name',
      'brazilsouth',
      '--protocol',
      'azure',
      '--base-url',
      azure.url,
      '--api-key-env',
      'AZURE_RES_KEY',
      '--upstream-model',
      upstream,
      '--region',
      'brazilsouth',
      '--country',
      'BR',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ model: id, name: 'brazilsouth', region: 'brazilsouth', country: 'BR' });
  }
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await azure?.close();
});

const chat = (key: string, model: string) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'oi' }], max_tokens: 2 }),
  });

async function brKey() {
  const t = await stack.tenant('1.00');
  const r = await cli(['key', 'create', '--tenant', t.tenantId, '--label', 'lgpd', '--data-country', 'BR', '--json']);
  expect(r.code, r.stderr).toBe(0);
  expect(r.json).toMatchObject({ data_country: 'BR' });
  return { tenantId: t.tenantId, key: r.json.key as string };
}

const balance = async (tenantId: string) =>
  BigInt((await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros);

describe('a --data-country BR key', () => {
  it('is served only by the Brazilian deployment, though the foreign one weighs 1000 to 1', async () => {
    const { key } = await brKey();
    const before = { ...azure.stats.byDeployment };
    for (let i = 0; i < 4; i++) {
      const res = await chat(key, 'residency/gpt');
      expect(res.status).toBe(200);
      expect((await res.json()).choices[0].message.content).toBe('Hello world');
    }
    expect((azure.stats.byDeployment['gpt-brazilsouth'] ?? 0) - (before['gpt-brazilsouth'] ?? 0)).toBe(4);
    expect(azure.stats.byDeployment['gpt-eastus'] ?? 0).toBe(before['gpt-eastus'] ?? 0);
    // /generation says where it ran
    const last = await chat(key, 'residency/gpt');
    const id = last.headers.get('x-request-id')!;
    await last.text();
    await stack.waitSettled([id]);
    const gen = await (await fetch(`${stack.baseUrl}/generation?id=${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(gen.data).toMatchObject({ id, deployment: 'brazilsouth', region: 'brazilsouth', country: 'BR' });
    // and a request served by the model's own row says so (it declares no place)
    const anywhere = await stack.tenant('1.00');
    const own = await chat(anywhere.key, 'residency/gpt');
    const ownId = own.headers.get('x-request-id')!;
    await own.text();
    await stack.waitSettled([ownId]);
    const ownGen = await (await fetch(`${stack.baseUrl}/generation?id=${ownId}`, { headers: { authorization: `Bearer ${anywhere.key}` } })).json();
    expect(ownGen.data).toMatchObject({ id: ownId, region: null, country: null });
    expect(['primary', 'brazilsouth']).toContain(ownGen.data.deployment);
  });

  it('when the Brazilian deployment is down: its own failure, then 403 while it cools down; never the healthy foreign one; nothing billed', async () => {
    const { tenantId, key } = await brKey();
    const abroad = azure.stats.byDeployment['gpt-eastus'] ?? 0;
    const home = azure.stats.byDeployment['busy-brazilsouth'] ?? 0;
    const first = await chat(key, 'residency/down');
    // its own failure (429); or, when the deployment's cool-down reached the front door before it
    // answered (seen once under CI's load), already the 403 — either way the vendor was called once
    expect([429, 403]).toContain(first.status);
    await first.text();
    expect(azure.stats.byDeployment['busy-brazilsouth']).toBe(home + 1);
    const second = await chat(key, 'residency/down');
    expect(second.status).toBe(403);
    expect(await second.json()).toMatchObject({
      error: {
        code: 'data_residency_unavailable',
        message: "This key's requests must stay in BR, and every deployment of residency/down there is unavailable now; it is not sent elsewhere.",
      },
    });
    expect(azure.stats.byDeployment['gpt-eastus'] ?? 0).toBe(abroad);
    // a key without a data country is served abroad meanwhile
    const anywhere = await stack.tenant('1.00');
    const res = await chat(anywhere.key, 'residency/down');
    expect(res.status).toBe(200);
    await res.text();
    expect(azure.stats.byDeployment['gpt-eastus']).toBe(abroad + 1);
    await stack.waitNoHolds(tenantId);
    expect(await balance(tenantId)).toBe(1_000_000n);
  });

  it('a model with no deployment in the country: refused at the front door, before the hold: 403 naming why, nothing held or billed', async () => {
    const { tenantId, key } = await brKey();
    const sent = { ...azure.stats.byDeployment };
    const res = await chat(key, 'residency/abroad');
    expect(res.status).toBe(403);
    const id = res.headers.get('x-request-id')!;
    // the door's own refusal (a worker's would be an upstream_error)
    expect(await res.json()).toEqual({
      error: {
        type: 'permission_error',
        code: 'data_residency_unavailable',
        message: "This key's requests must stay in BR, and residency/abroad has no deployment there.",
        param: 'model',
      },
    });
    const held = await stack.db.query('select held_micros, balance_micros from tenants where id = $1', [tenantId]);
    expect(held.rows[0]).toEqual({ held_micros: 0n, balance_micros: 1_000_000n });
    expect((await stack.db.query('select count(*)::int as n from holds where request_id = $1', [id])).rows[0].n).toBe(0);
    expect((await stack.db.query('select count(*)::int as n from ledger where tenant_id = $1 and source = $2', [tenantId, 'request'])).rows[0].n).toBe(0);
    expect(azure.stats.byDeployment).toEqual(sent);
    // the key may still use a model that has a deployment there
    const ok = await chat(key, 'residency/gpt');
    expect(ok.status).toBe(200);
    await ok.text();
  });

  it('refuses a malformed --data-country and --country', async () => {
    const t = await stack.tenant('1.00');
    const bad = await cli(['key', 'create', '--tenant', t.tenantId, '--label', 'x', '--data-country', 'Brasil']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--data-country is a country code of two capital letters');
    const badDep = await cli(['model', 'deployment', 'add', '--model', 'residency/gpt', '--name', 'x', '--base-url', azure.url, '--country', 'br']);
    expect(badDep.code).not.toBe(0);
    expect(badDep.stderr).toContain('--country is two capital letters');
  });
});
