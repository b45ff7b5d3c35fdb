// The vendor's batch cost in the console's margin (migration 091): a line of a batch that ran in
// `vendor` mode is costed at the batch vendor prices in force when it was made (each one not set
// falling back to the online vendor price of the same row); a `queue`-mode batch line and an
// online request of the same model and tokens at the online vendor prices. Which batches ran in
// vendor mode is what the front door's startVendorMode records, kept after the sweeper deleted the
// batch. And the batch vendor prices set through the console's vendor-cost form: validated,
// audited, read back in the form and the history, and used by the margin.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credit, settle } from '../../src/billing/ledger.ts';
import { startVendorMode } from '../../src/batch/vendor.ts';
import { createOperator, type OperatorSetup, totpFor } from '../../src/console/auth.ts';
import { defaultRange } from '../../src/console/money.ts';
import { type ConsoleServer, startConsole } from '../../src/console/server.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { PortalClient } from '../portal/client.ts';

const ADMIN_URL = process.env.DATABASE_URL!;
const admin = createPool(ADMIN_URL, 3);
const consoleDb = createPool(derivedRoleUrl(ADMIN_URL, 'console'), 5);
const u = randomBytes(4).toString('hex');
/** with batch vendor prices; without any; set through the form */
const M = { batch: `bmargin/batch-${u}`, plain: `bmargin/plain-${u}`, form: `bmargin/form-${u}`, sale: `bmargin/sale-${u}` };
type Who = 'online' | 'queue' | 'vendor' | 'late' | 'plain';
const T = {} as Record<Who, { id: string; key: string }>;
let server: ConsoleServer;
let client: PortalClient;
let setup: OperatorSetup;

const batchId = (tag: string) => `batch_${tag}${u}${randomBytes(6).toString('hex')}`;

/**
 * A batch started in vendor mode by the front door's own statement (src/batch/vendor.ts), then its
 * row deleted as the sweeper does BATCH_RETENTION_DAYS after it ended: vendor_batch_ids keeps it.
 */
async function vendorBatch(tenant: { id: string; key: string }): Promise<string> {
  const id = batchId('v');
  await admin.query(
    `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, expires_at)
     values ($1, $2, $3, 'file-none', '/v1/chat/completions', '24h', 'validating', 1, now() + interval '1 day')`,
    [id, tenant.id, tenant.key],
  );
  const started = await startVendorMode(admin, id, 60);
  expect({ id: started?.id, mode: (started as { mode?: string } | null)?.mode, status: started?.status }).toEqual({
    id,
    mode: 'vendor',
    status: 'in_progress',
  });
  // a second start (another door) changes nothing and records nothing twice
  expect(await startVendorMode(admin, id, 60)).toBeNull();
  await admin.query('delete from batches where id = $1', [id]);
  expect((await admin.query('select count(*)::int as n from vendor_batch_ids where batch_id = $1', [id])).rows).toEqual([{ n: 1 }]);
  return id;
}

/** The same tokens for every line: 10 001 in (2 000 cache reads, 1 000 cache writes, 500 1-hour writes), 3 001 out (500 reasoning). */
const TOKENS = {
  inputTokens: 10_001,
  outputTokens: 3_001,
  detail: { cachedTokens: 2_000, cacheWriteTokens: 1_000, cacheWrite1hTokens: 500, reasoningTokens: 500 },
};

async function line(who: Who, model: string, at: string, cost: bigint, batch: string | undefined) {
  await settle(admin, {
    requestId: `bm_${who}_${u}`,
    tenantId: T[who].id,
    keyId: T[who].key,
    costMicros: cost,
    model,
    inputTokens: TOKENS.inputTokens,
    outputTokens: TOKENS.outputTokens,
    estimated: false,
    outcome: 'completed',
    at: new Date(at),
    detail: { ...TOKENS.detail, batchId: batch },
  });
}

beforeAll(async () => {
  for (const who of ['online', 'queue', 'vendor', 'late', 'plain'] as const) {
    const tenant = await createTenant(admin, `Lote Margem ${who} ${u}`);
    await credit(admin, { tenantId: tenant.id, amountMicros: 10_000_000n, source: 'grant', note: 'batch margin test' });
    T[who] = { id: tenant.id, key: (await createApiKey(admin, { tenantId: tenant.id, label: 'batch margin' })).record.id };
  }
  const cost = (model: string, from: string, c: Record<string, bigint | null>) =>
    admin.query(
      `insert into model_vendor_costs (model_id, valid_from, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price,
                                       batch_input_price, batch_cached_input_price, batch_cache_write_price, batch_cache_write_1h_price, batch_output_price)
       values ($1, $2, 'BRL', $3, $4, $5, null, $6, $7, $8, null, null, $9)`,
      [model, from, c.input, c.cached, c.cw, c.output, c.bInput ?? null, c.bCached ?? null, c.bOutput ?? null],
    );
  const online = { input: 1_250_000n, cached: 125_000n, cw: 1_562_500n, output: 10_000_000n };
  // until 18:00 UTC on 2025-04-08: half the online prices in batch, no batch cache-write prices
  await cost(M.batch, '2025-01-01T00:00:00Z', { ...online, bInput: 625_000n, bCached: 62_500n, bOutput: 5_000_000n });
  // from then: only a batch output price
  await cost(M.batch, '2025-04-08T18:00:00Z', { ...online, bOutput: 4_000_000n });
  await cost(M.plain, '2025-01-01T00:00:00Z', online);
  const queueBatch = batchId('q'); // queue mode: never in vendor_batch_ids (its batches row long gone)
  await line('online', M.batch, '2025-04-08T15:00:00Z', 60_000n, undefined);
  await line('queue', M.batch, '2025-04-08T15:00:00Z', 30_000n, queueBatch);
  await line('vendor', M.batch, '2025-04-08T15:00:00Z', 30_000n, await vendorBatch(T.vendor));
  // 17:00 in São Paulo, the same day: after the change of 18:00 UTC
  await line('late', M.batch, '2025-04-08T20:00:00Z', 30_000n, await vendorBatch(T.late));
  await line('plain', M.plain, '2025-04-08T15:00:00Z', 30_000n, await vendorBatch(T.plain));

  const op = await createOperator(admin, { email: `bmargin.${u}@example.com`, createdBy: null });
  if (!op.ok) throw new Error(op.error);
  setup = op.setup;
  server = await startConsole({ db: consoleDb, nc: null, port: 0 });
  client = new PortalClient(server.url);
  const token = await client.csrfOf('/login');
  const signed = await client.post('/login', {
    _csrf: token,
    email: setup.operator.email,
    password: setup.password,
    code: totpFor(setup.totpSecret, setup.operator.email).generate(),
  });
  expect(signed.status).toBe(303);
});

afterAll(async () => {
  await server?.close();
  await Promise.all([admin.end(), consoleDb.end()]);
});

/** day, tenant, requests, revenue, cost, margin, batch requests, batch revenue, batch cost, batch margin */
const csvRows = (text: string) =>
  text
    .trimEnd()
    .split('\r\n')
    .slice(1)
    .map((l) => l.split(','))
    .map((c) => [c[0], c[1], c[4], ...c.slice(10, 13), ...c.slice(14)].join(' '));

describe('a vendor-mode batch line at the vendor’s batch price', () => {
  /**
   * By hand, per line (µ = µBRL per 1M tokens, BRL so F = 10⁶; cost = ⌊(Σ tokens × µ × 10⁶ + 5·10¹¹) / 10¹²⌋).
   * Tokens: 6 501 plain input (10 001 − 2 000 − 1 000 − 500), 2 000 cache reads, 1 000 writes, 500 1-hour writes, 3 001 out.
   * Online prices: 1 250 000 in, 125 000 cached, 1 562 500 write, 1-hour write none (→ input 1 250 000), 10 000 000 out.
   *   online request, queue-mode line (same):
   *     6 501×1 250 000 + 2 000×125 000 + 1 000×1 562 500 + 500×1 250 000 + 3 001×10 000 000
   *     = 8 126 250 000 + 250 000 000 + 1 562 500 000 + 625 000 000 + 30 010 000 000 = 40 573 750 000 → 40 573.75 → 40 574
   *   vendor-mode line (batch: 625 000 in, 62 500 cached, no write prices → the online write prices, 5 000 000 out):
   *     6 501×625 000 + 2 000×62 500 + 1 000×1 562 500 + 500×1 250 000 + 3 001×5 000 000
   *     = 4 063 125 000 + 125 000 000 + 1 562 500 000 + 625 000 000 + 15 005 000 000 = 21 380 625 000 → 21 380.625 → 21 381
   *   vendor-mode line after the 18:00 UTC row (batch output 4 000 000 only; the rest online):
   *     8 126 250 000 + 250 000 000 + 1 562 500 000 + 625 000 000 + 3 001×4 000 000 (12 004 000 000) = 22 567 750 000 → 22 568
   *   vendor-mode line of a model without batch vendor prices: the online 40 574
   * Revenue (what each was debited): 60 000 online; 30 000 each batch line (the batch prices).
   */
  it('the CSV: each line’s vendor cost to the µBRL, batch columns', async () => {
    const res = await client.get(`/money.csv?from=2025-04-08&to=2025-04-08&model=${encodeURIComponent(M.batch)}`);
    expect(res.status).toBe(200);
    const [first, ...batchLines] = csvRows(res.text);
    // the most revenue first: the online request; then the three batch lines (the same revenue: by tenant id)
    expect(first).toBe(`2025-04-08 ${T.online.id} 1 0.060000 0.040574 0.019426 0 0.000000 0.000000 0.000000`);
    expect(batchLines.sort()).toEqual(
      [
        `2025-04-08 ${T.queue.id} 1 0.030000 0.040574 -0.010574 1 0.030000 0.040574 -0.010574`,
        `2025-04-08 ${T.vendor.id} 1 0.030000 0.021381 0.008619 1 0.030000 0.021381 0.008619`,
        `2025-04-08 ${T.late.id} 1 0.030000 0.022568 0.007432 1 0.030000 0.022568 0.007432`,
      ].sort(),
    );
  });

  it('a vendor-mode line of a model with no batch vendor price costs the online vendor price', async () => {
    const res = await client.get(`/money.csv?from=2025-04-08&to=2025-04-08&model=${encodeURIComponent(M.plain)}`);
    expect(csvRows(res.text)).toEqual([`2025-04-08 ${T.plain.id} 1 0.030000 0.040574 -0.010574 1 0.030000 0.040574 -0.010574`]);
  });

  it('the page: totals and batch totals of the model', async () => {
    const page = (await client.get(`/money?from=2025-04-08&to=2025-04-08&model=${encodeURIComponent(M.batch)}`)).text;
    const text = (id: string) => new RegExp(`data-testid="${id}">([^<]*)<`).exec(page)?.[1];
    // revenue 60 000 + 3 × 30 000 = 150 000; cost 40 574 + 40 574 + 21 381 + 22 568 = 125 097 (rows summed);
    // batch: 90 000 against 40 574 + 21 381 + 22 568 = 84 523, margin 5 477
    expect(['total-revenue', 'total-cost', 'total-margin', 'batch-revenue', 'batch-cost', 'batch-margin'].map(text)).toEqual([
      'R$ 0,15',
      'R$ 0,125097',
      'R$ 0,024903',
      'R$ 0,09',
      'R$ 0,084523',
      'R$ 0,005477',
    ]);
  });
});

describe('batch vendor prices set in the console', () => {
  it('validated, audited, read back in the form and the history, and used for vendor-mode lines', async () => {
    await upsertModel(admin, { id: M.form, pool: 'sim', upstream_model: 'echo', input_price: 5_000_000n, output_price: 15_000_000n, context_length: 8192 });
    const page = await client.get(`/catalog/models/${M.form}`);
    expect(page.status).toBe(200);
    for (const label of [
      'Custo em lote (entrada)',
      'Custo em lote (entrada em cache)',
      'Custo em lote (escrita em cache)',
      'Custo em lote (escrita em cache por 1 hora)',
      'Custo em lote (saída)',
    ])
      expect(page.text).toContain(`<label>${label}<input`);
    const form = {
      _csrf: PortalClient.csrf(page.text),
      currency: 'BRL',
      v_input: '1,25',
      v_cached: '',
      v_cache_write: '',
      v_cache_write_1h: '',
      v_output: '10',
      usd_brl: '',
      v_batch_input: '',
      v_batch_cached: '',
      v_batch_cache_write: '',
      v_batch_cache_write_1h: '',
      v_batch_output: '',
    };
    // first the online prices alone
    expect(await client.post(`/catalog/models/${M.form}/vendor-cost`, form)).toMatchObject({ status: 303, location: `/catalog/models/${M.form}?done=vendor` });
    // a batch price is validated like the others: nothing saved, the form kept
    const bad = await client.post(`/catalog/models/${M.form}/vendor-cost`, { ...form, v_batch_input: '0,625', v_batch_output: '-5' });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('Valor inválido: use dígitos e no máximo uma vírgula ou ponto antes dos centavos (12,34).');
    expect(bad.text).toContain('name="v_batch_input" inputmode="decimal" value="0,625"');
    expect(bad.text).toContain('name="v_batch_output" inputmode="decimal" value="-5"');
    const tooFine = await client.post(`/catalog/models/${M.form}/vendor-cost`, { ...form, v_batch_input: '0,0000001' });
    expect(tooFine.status).toBe(400);
    expect(tooFine.text).toContain('No máximo 6 casas decimais.');
    // then half the input and output in batch, a batch cache-write price, the others empty
    const saved = await client.post(`/catalog/models/${M.form}/vendor-cost`, {
      ...form,
      v_batch_input: '0,625',
      v_batch_cache_write: '0,78125',
      v_batch_output: '5',
    });
    expect(saved).toMatchObject({ status: 303, location: `/catalog/models/${M.form}?done=vendor` });
    const { rows } = await admin.query(
      `select input_price, output_price, batch_input_price, batch_cached_input_price, batch_cache_write_price, batch_cache_write_1h_price, batch_output_price, set_by
         from model_vendor_costs where model_id = $1 order by id`,
      [M.form],
    );
    const none = {
      batch_input_price: null,
      batch_cached_input_price: null,
      batch_cache_write_price: null,
      batch_cache_write_1h_price: null,
      batch_output_price: null,
    };
    expect(rows).toEqual([
      { input_price: 1_250_000n, output_price: 10_000_000n, ...none, set_by: setup.operator.id },
      {
        input_price: 1_250_000n,
        output_price: 10_000_000n,
        ...none,
        batch_input_price: 625_000n,
        batch_cache_write_price: 781_250n,
        batch_output_price: 5_000_000n,
        set_by: setup.operator.id,
      },
    ]);
    const audit = await admin.query(`select before, after from console_audit where target = $1 and action = 'vendor_cost_change' order by id`, [M.form]);
    expect(audit.rows.map((r) => r.after)).toEqual([
      expect.objectContaining({ currency: 'BRL', input_price: '1250000', output_price: '10000000', ...none }),
      expect.objectContaining({
        currency: 'BRL',
        input_price: '1250000',
        batch_input_price: '625000',
        batch_cached_input_price: null,
        batch_cache_write_price: '781250',
        batch_cache_write_1h_price: null,
        batch_output_price: '5000000',
      }),
    ]);
    expect(audit.rows[1].before).toEqual(expect.objectContaining({ batch_input_price: null, batch_output_price: null }));
    // read back: the form holds the prices in force, the history both rows (newest first), the catalog the batch cost
    const back = await client.get(`/catalog/models/${M.form}`);
    for (const [name, value] of [
      ['v_batch_input', '0.625'],
      ['v_batch_cached', ''],
      ['v_batch_cache_write', '0.78125'],
      ['v_batch_cache_write_1h', ''],
      ['v_batch_output', '5'],
    ])
      expect(back.text).toContain(`name="${name}" inputmode="decimal" value="${value}"`);
    const history = [...back.text.matchAll(/data-testid="vendor-history-row"[\s\S]*?<\/tr>/g)].map((m) => [
      /data-testid="history-online">([^<]*)</.exec(m[0])![1],
      /data-testid="history-batch">([^<]*)</.exec(m[0])![1],
      m[0].includes(setup.operator.email),
    ]);
    expect(history).toEqual([
      ['R$ 1,25 / — / — / — / R$ 10,00', 'R$ 0,625 / — / R$ 0,78125 / — / R$ 5,00', true],
      ['R$ 1,25 / — / — / — / R$ 10,00', '— / — / — / — / —', true],
    ]);
    expect((await client.get('/catalog')).text).toMatch(
      new RegExp(
        `data-model="${M.form}"[\\s\\S]*?data-testid="vendor-cost">R\\$ 1,25 / — / R\\$ 10,00</span><br><small data-testid="vendor-batch-cost">em lote: R\\$ 0,625 / R\\$ 5,00<`,
      ),
    );
    // a vendor-mode line now: 1 000 in (300 of them written to the cache), 100 out →
    //   700×625 000 + 300×781 250 + 100×5 000 000 = 437 500 000 + 234 375 000 + 500 000 000 = 1 171 875 000 → 1 171.875 → 1 172 µBRL
    //   (online it would be 700×1 250 000 + 300×1 250 000 + 100×10 000 000 = 2 250 000 000 → 2 250)
    await settle(admin, {
      requestId: `bm_form_${u}`,
      tenantId: T.vendor.id,
      keyId: T.vendor.key,
      costMicros: 900n,
      model: M.form,
      inputTokens: 1000,
      outputTokens: 100,
      estimated: false,
      outcome: 'completed',
      at: new Date(),
      detail: { cacheWriteTokens: 300, batchId: await vendorBatch(T.vendor) },
    });
    const today = defaultRange().to;
    const csv = await client.get(`/money.csv?from=${today}&to=${today}&model=${encodeURIComponent(M.form)}`);
    expect(csvRows(csv.text)).toEqual([`${today} ${T.vendor.id} 1 0.000900 0.001172 -0.000272 1 0.000900 0.001172 -0.000272`]);
  });
});

describe('batch sale prices set in the console', () => {
  it('validated, saved on the model (empty: the online price), audited, read back in the form and the catalog', async () => {
    await upsertModel(admin, { id: M.sale, pool: 'sim', upstream_model: 'echo', input_price: 5_000_000n, output_price: 15_000_000n, context_length: 8192 });
    const page = await client.get(`/catalog/models/${M.sale}`);
    expect(page.status).toBe(200);
    for (const label of ['Preço em lote (entrada)', 'Preço em lote (entrada em cache)', 'Preço em lote (saída)'])
      expect(page.text).toContain(`<label>${label}<input`);
    const form = {
      _csrf: PortalClient.csrf(page.text),
      input_price: '5',
      cached_input_price: '',
      output_price: '15',
      batch_input_price: '2,5',
      batch_cached_input_price: '',
      batch_output_price: '7,50',
      reason: 'metade em lote',
    };
    const salePrices = async () =>
      (
        await admin.query(
          'select input_price, cached_input_price, output_price, batch_input_price, batch_cached_input_price, batch_output_price from models where id = $1',
          [M.sale],
        )
      ).rows[0];
    // a bad batch price: nothing saved, the form kept
    const bad = await client.post(`/catalog/models/${M.sale}`, { ...form, batch_output_price: '-1' });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('Valor inválido: use dígitos e no máximo uma vírgula ou ponto antes dos centavos (12,34).');
    expect(bad.text).toContain('name="batch_output_price" inputmode="decimal" value="-1"');
    const online = {
      input_price: 5_000_000n,
      cached_input_price: null,
      output_price: 15_000_000n,
      batch_input_price: null,
      batch_cached_input_price: null,
      batch_output_price: null,
    };
    expect(await salePrices()).toEqual(online);
    // half the online price in batch, the cached input left to the online one
    expect(await client.post(`/catalog/models/${M.sale}`, form)).toMatchObject({
      status: 303,
      location: `/catalog/models/${M.sale}?done=prices&nats=0`, // (this console has no NATS to tell the doors by)
    });
    expect(await salePrices()).toEqual({ ...online, batch_input_price: 2_500_000n, batch_output_price: 7_500_000n });
    const audit = await admin.query(`select before, after, reason from console_audit where target = $1 and action = 'price_change' order by id`, [M.sale]);
    expect(audit.rows).toEqual([
      {
        before: {
          input_price: '5000000',
          cached_input_price: null,
          output_price: '15000000',
          batch_input_price: null,
          batch_cached_input_price: null,
          batch_output_price: null,
        },
        after: {
          input_price: '5000000',
          cached_input_price: null,
          output_price: '15000000',
          batch_input_price: '2500000',
          batch_cached_input_price: null,
          batch_output_price: '7500000',
        },
        reason: 'metade em lote',
      },
    ]);
    const back = await client.get(`/catalog/models/${M.sale}`);
    for (const [name, value] of [
      ['batch_input_price', '2.5'],
      ['batch_cached_input_price', ''],
      ['batch_output_price', '7.5'],
    ])
      expect(back.text).toContain(`name="${name}" inputmode="decimal" value="${value}"`);
    expect((await client.get('/catalog')).text).toMatch(
      new RegExp(`data-model="${M.sale}"[\\s\\S]*?data-testid="price-output">R\\$ 15,00<br><small data-testid="price-batch">em lote: R\\$ 2,50 / R\\$ 7,50<`),
    );
    // emptied: the online prices again
    expect(await client.post(`/catalog/models/${M.sale}`, { ...form, batch_input_price: '', batch_output_price: '' })).toMatchObject({ status: 303 });
    expect(await salePrices()).toEqual(online);
    const row = new RegExp(`data-testid="model-row" data-model="${M.sale}"[\\s\\S]*?</tr>`).exec((await client.get('/catalog')).text)![0];
    expect(row).toContain('data-testid="price-output">R$ 15,00</td>');
    expect(row).not.toContain('price-batch');
  });
});
