// Seed data of a local stack. Idempotent: running it again changes nothing except the demo key,
// which is replaced on every start (the previous demo keys are revoked, so exactly the key that
// the banner prints is live; a plain key cannot be shown twice because only its hash is stored).
import { credit } from '../billing/ledger.ts';
import { parseBrl } from '../billing/money.ts';
import { createApiKey } from '../db/keys.ts';
import { getModel, upsertModel, type ModelInput } from '../db/models.ts';
import { withTransaction, type Db, type DbClient } from '../db/pool.ts';
import { createTenant, getTenant } from '../db/tenants.ts';

export const DEMO_TENANT_ID = 'ten_demo';
export const DEMO_TENANT_NAME = 'Demo';
export const DEMO_GRANT_EXTERNAL_ID = 'seed:demo-grant';
export const DEMO_GRANT_MICROS = parseBrl('100.00');

/** The built-in simulated vendor (pool `sim`), so the gateway works with no upstream account. */
export const SIM_CATALOG: ModelInput[] = [
  {
    id: 'sim/echo',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: parseBrl('1.00'), // BRL per 1M input tokens
    output_price: parseBrl('2.00'),
    max_output_tokens: 4096,
    context_length: 128000,
    name: 'Simulated echo',
    description: 'Built-in deterministic simulator: answers with the last user message.',
  },
  {
    id: 'sim/lorem',
    pool: 'sim',
    upstream_model: 'lorem',
    input_price: parseBrl('0.50'),
    output_price: parseBrl('1.50'),
    max_output_tokens: 4096,
    context_length: 128000,
    name: 'Simulated lorem ipsum',
    description: 'Built-in deterministic simulator: answers with lorem ipsum text.',
  },
  {
    id: 'sim/embed',
    pool: 'sim',
    upstream_model: 'embed',
    kind: 'embedding',
    input_price: parseBrl('0.10'),
    output_price: 0n,
    context_length: 8192,
    name: 'Simulated embeddings',
    description: 'Built-in deterministic simulator: 256-dimension embeddings (dimensions honoured) derived from a hash of each input.',
  },
];

/**
 * Creates the sim/* models that are missing. Existing rows are left alone, so prices an operator
 * changed with `catraca model set` survive a restart. Returns the ids created.
 */
export async function seedCatalog(db: DbClient): Promise<string[]> {
  const created: string[] = [];
  for (const m of SIM_CATALOG) {
    if (await getModel(db, m.id)) continue;
    await upsertModel(db, m);
    created.push(m.id);
  }
  return created;
}

/** The demo tenant with its one-time R$ 100,00 grant (exactly once, keyed by its external id). */
export async function seedDemoTenant(db: DbClient): Promise<{ tenantId: string; granted: boolean }> {
  if (!(await getTenant(db, DEMO_TENANT_ID))) {
    await createTenant(db, DEMO_TENANT_NAME, DEMO_TENANT_ID).catch((err) => {
      if (err.code !== '23505') throw err; // created concurrently
    });
  }
  const res = await credit(db, {
    tenantId: DEMO_TENANT_ID,
    amountMicros: DEMO_GRANT_MICROS,
    source: 'grant',
    externalId: DEMO_GRANT_EXTERNAL_ID,
    note: 'demo grant (seed)',
  });
  return { tenantId: DEMO_TENANT_ID, granted: res.status === 'credited' };
}

/** Revokes every earlier demo key of the demo tenant and creates a fresh one (label `demo`). */
export async function rotateDemoKey(db: Db): Promise<{ keyId: string; key: string; revoked: string[] }> {
  return withTransaction(db, async (client) => {
    const { rows } = await client.query(
      `update api_keys set revoked_at = now()
        where tenant_id = $1 and is_demo and revoked_at is null returning id`,
      [DEMO_TENANT_ID],
    );
    const { record, key } = await createApiKey(client, { tenantId: DEMO_TENANT_ID, label: 'demo', models: null, isDemo: true });
    return { keyId: record.id, key, revoked: rows.map((r) => r.id as string) };
  });
}

export interface SeedResult {
  tenantId: string;
  granted: boolean;
  modelsCreated: string[];
  demoKey: { keyId: string; key: string; revoked: string[] };
}

export async function seedAll(db: Db): Promise<SeedResult> {
  const modelsCreated = await seedCatalog(db);
  const { tenantId, granted } = await seedDemoTenant(db);
  const demoKey = await rotateDemoKey(db);
  return { tenantId, granted, modelsCreated, demoKey };
}
