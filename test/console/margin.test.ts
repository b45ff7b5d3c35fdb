// The console's money views against a hand computation (issue 21): revenue (what tenants were
// debited), vendor cost (each request's tokens — cached, cache writes and reasoning included — at
// the vendor prices in force when it was made, USD × the recorded rate or BRL) and margin, per São
// Paulo day × model × tenant, in the page, its chart, its CSV, and the tenants list; shortfalls
// with their requests; a vendor cost set through the console's form.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credit, settle } from '../../src/billing/ledger.ts';
import { formatBrl } from '../../src/billing/money.ts';
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
const M = { usd: `margin/usd-${u}`, brl: `margin/brl-${u}`, none: `margin/none-${u}`, form: `margin/form-${u}` };
const T: Record<'one' | 'two' | 'three', { id: string; key: string; name: string }> = {
  one: { id: '', key: '', name: `Margem Um ${u}` },
  two: { id: '', key: '', name: `Margem Dois ${u}` },
  three: { id: '', key: '', name: `Margem Três ${u}` },
};
let server: ConsoleServer;
let client: PortalClient;
let setup: OperatorSetup;

type Req = {
  id: string;
  tenant: keyof typeof T;
  model: string;
  at: string;
  cost: bigint;
  input: number;
  output: number;
  cached?: number;
  cw?: number;
  cw1h?: number;
  reasoning?: number;
};
/** The known set of requests (São Paulo is UTC−3). */
const REQUESTS: Req[] = [
  // the day before the range in São Paulo (23:59 on the 9th), and the day after (00:30 on the 13th): left out
  { id: `m_before_${u}`, tenant: 'one', model: M.usd, at: '2025-02-10T02:59:00Z', cost: 9_999n, input: 10, output: 10 },
  { id: `m_after_${u}`, tenant: 'one', model: M.usd, at: '2025-02-13T03:30:00Z', cost: 9_999n, input: 10, output: 10 },
  { id: `m_r1_${u}`, tenant: 'one', model: M.usd, at: '2025-02-10T12:00:00Z', cost: 50_000n, input: 1000, cached: 400, output: 500, reasoning: 100 },
  // 23:30 on the 10th in São Paulo, the 11th in UTC
  { id: `m_r2_${u}`, tenant: 'one', model: M.usd, at: '2025-02-11T02:30:00Z', cost: 70_000n, input: 2000, output: 1000 },
  // after the vendor's price change at 15:00 UTC on the 11th
  { id: `m_r3_${u}`, tenant: 'one', model: M.usd, at: '2025-02-11T16:00:00Z', cost: 40_000n, input: 3000, cached: 1000, output: 200 },
  { id: `m_r4_${u}`, tenant: 'two', model: M.brl, at: '2025-02-11T13:00:00Z', cost: 30_000n, input: 10_000, cached: 2000, cw: 3000, cw1h: 1000, output: 4000 },
  { id: `m_r5_${u}`, tenant: 'two', model: M.none, at: '2025-02-12T10:00:00Z', cost: 1_234n, input: 500, output: 500 },
  // a shortfall: it cost R$ 0,005, the tenant had R$ 0,0003
  { id: `m_r6_${u}`, tenant: 'three', model: M.brl, at: '2025-02-12T11:00:00Z', cost: 5_000n, input: 100, output: 100 },
];

/**
 * The hand computation, request by request (µ = micro-units per 1M tokens; F = µBRL per USD):
 *   r1  USD v1 (2.50 / 1.25 cached / 10.00 out, F 5 432 100): (600×2 500 000 + 400×1 250 000 + 500×10 000 000) × 5 432 100
 *       = 7 000 000 000 × 5 432 100 = 38 024 700 000 000 000
 *   r2  USD v1: (2000×2 500 000 + 1000×10 000 000) × 5 432 100 = 15 000 000 000 × 5 432 100 = 81 481 500 000 000 000
 *       day 10, usd, one: (38 024 700 + 81 481 500) × 10⁹ / 10¹² = 119 506.2 → 119 506 µBRL against 120 000 debited
 *   r3  USD v2 (3.00, cached = input, 12.00 out, F 5 100 000): (2000×3 000 000 + 1000×3 000 000 + 200×12 000 000) × 5 100 000
 *       = 11 400 000 000 × 5 100 000 → 58 140 µBRL against 40 000 debited (a negative margin)
 *   r4  BRL (0.80 / 0.20 cached / 1.00 write / 1.60 write 1 h / 3.20 out): 4000×800 000 + 2000×200 000 + 3000×1 000 000
 *       + 1000×1 600 000 + 4000×3 200 000 = 21 000 000 000 µ·tokens → 21 000 µBRL against 30 000
 *   r5  no vendor cost: 1 234 of revenue, uncosted
 *   r6  BRL: 100×800 000 + 100×3 200 000 = 400 000 000 → 400 µBRL against the 300 debited
 */
const EXPECTED = [
  { day: '2025-02-12', model: M.none, tenant: 'two', requests: 1, revenue: 1_234n, cost: 0n, uncosted: 1 },
  { day: '2025-02-12', model: M.brl, tenant: 'three', requests: 1, revenue: 300n, cost: 400n, uncosted: 0 },
  { day: '2025-02-11', model: M.usd, tenant: 'one', requests: 1, revenue: 40_000n, cost: 58_140n, uncosted: 0 },
  { day: '2025-02-11', model: M.brl, tenant: 'two', requests: 1, revenue: 30_000n, cost: 21_000n, uncosted: 0 },
  { day: '2025-02-10', model: M.usd, tenant: 'one', requests: 2, revenue: 120_000n, cost: 119_506n, uncosted: 0 },
] as const;

beforeAll(async () => {
  for (const [k, t] of Object.entries(T)) {
    const tenant = await createTenant(admin, t.name);
    t.id = tenant.id;
    await credit(admin, { tenantId: t.id, amountMicros: k === 'three' ? 300n : 10_000_000n, source: 'grant', note: 'margin test' });
    t.key = (await createApiKey(admin, { tenantId: t.id, label: 'margin' })).record.id;
  }
  const cost = (model: string, from: string, c: Record<string, unknown>) =>
    admin.query(
      `insert into model_vendor_costs (model_id, valid_from, currency, input_price, cached_input_price, cache_write_price, cache_write_1h_price, output_price, usd_brl_micros)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [model, from, c.currency, c.input, c.cached ?? null, c.cw ?? null, c.cw1h ?? null, c.output, c.rate ?? null],
    );
  await cost(M.usd, '2025-01-01T00:00:00Z', { currency: 'USD', input: 2_500_000n, cached: 1_250_000n, output: 10_000_000n, rate: 5_432_100n });
  await cost(M.usd, '2025-02-11T15:00:00Z', { currency: 'USD', input: 3_000_000n, output: 12_000_000n, rate: 5_100_000n });
  await cost(M.brl, '2025-01-01T00:00:00Z', { currency: 'BRL', input: 800_000n, cached: 200_000n, cw: 1_000_000n, cw1h: 1_600_000n, output: 3_200_000n });
  for (const r of REQUESTS) {
    await settle(admin, {
      requestId: r.id,
      tenantId: T[r.tenant].id,
      keyId: T[r.tenant].key,
      costMicros: r.cost,
      model: r.model,
      inputTokens: r.input,
      outputTokens: r.output,
      estimated: false,
      outcome: 'completed',
      at: new Date(r.at),
      detail: { cachedTokens: r.cached, cacheWriteTokens: r.cw, cacheWrite1hTokens: r.cw1h, reasoningTokens: r.reasoning },
    });
  }
  const op = await createOperator(admin, { email: `margin.${u}@example.com`, createdBy: null });
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

const RANGE = 'from=2025-02-10&to=2025-02-12';

describe('margin per São Paulo day × model × tenant', () => {
  it('the CSV: every group, exact to the micro-real, as computed by hand', async () => {
    const res = await client.get(`/money.csv?${RANGE}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(res.headers.get('content-disposition')).toBe('attachment; filename="catraca-margin-2025-02-10-2025-02-12.csv"');
    const [head, ...lines] = res.text.trimEnd().split('\r\n');
    expect(head).toBe(
      'day,tenant_id,tenant,model,requests,input_tokens,cached_tokens,cache_write_tokens,output_tokens,reasoning_tokens,revenue_brl,vendor_cost_brl,margin_brl,uncosted_requests,batch_requests,batch_revenue_brl,batch_vendor_cost_brl,batch_margin_brl',
    );
    const got = lines
      .map((l) => l.split(','))
      .map((c) => ({ day: c[0], tenant: c[1], model: c[3], requests: c[4], revenue: c[10], cost: c[11], margin: c[12], uncosted: c[13] }));
    expect(got).toEqual(
      EXPECTED.map((e) => ({
        day: e.day,
        tenant: T[e.tenant].id,
        model: e.model,
        requests: String(e.requests),
        revenue: formatBrl(e.revenue),
        cost: formatBrl(e.cost),
        margin: formatBrl(e.revenue - e.cost),
        uncosted: String(e.uncosted),
      })),
    );
    // the literal figures, for the record
    expect(lines.map((l) => l.split(',').slice(10, 13).join(' '))).toEqual([
      '0.001234 0.000000 0.001234',
      '0.000300 0.000400 -0.000100',
      '0.040000 0.058140 -0.018140',
      '0.030000 0.021000 0.009000',
      '0.120000 0.119506 0.000494',
    ]);
    // tokens of the group of two (r1 + r2): input, cached, writes, output, reasoning
    expect(lines[4].split(',').slice(5, 10)).toEqual(['3000', '400', '0', '1500', '100']);
    expect(lines[3].split(',').slice(5, 10)).toEqual(['10000', '2000', '4000', '4000', '0']);
  });

  it('the page: totals, the table in pt-BR, the chart per day; a tenant or model filter', async () => {
    const res = await client.get(`/money?${RANGE}`);
    expect(res.status).toBe(200);
    const text = (id: string) => new RegExp(`data-testid="${id}">([^<]*)<`).exec(res.text)?.[1];
    // 191 534 of revenue, 199 046 of cost, −7 512 of margin
    expect([text('total-revenue'), text('total-cost'), text('total-margin')]).toEqual(['R$ 0,191534', 'R$ 0,199046', '-R$ 0,007512']);
    expect(res.text).toContain('data-testid="uncosted">1 requisições de modelos sem custo de fornecedor');
    const rows = [...res.text.matchAll(/data-testid="margin-row" data-day="([^"]+)" data-model="([^"]+)" data-tenant="([^"]+)">[\s\S]*?<\/tr>/g)];
    expect(rows.map((r) => [r[1], r[2], r[3]])).toEqual(EXPECTED.map((e) => [e.day, e.model, T[e.tenant].id]));
    const cells = (row: string) => ['row-revenue', 'row-cost', 'row-margin'].map((id) => new RegExp(`data-testid="${id}">([^<]*)<`).exec(row)![1]);
    expect(cells(rows[4][0])).toEqual(['R$ 0,12', 'R$ 0,119506', 'R$ 0,000494']);
    expect(cells(rows[0][0])).toEqual(['R$ 0,001234', '—', '—']);
    const bars = [...res.text.matchAll(/<rect class="(revenue|cost)"[^>]* data-day="([^"]+)" data-micros="(\d+)"/g)].map((m) => `${m[2]} ${m[1]} ${m[3]}`);
    expect(bars).toEqual([
      '2025-02-10 revenue 120000',
      '2025-02-10 cost 119506',
      '2025-02-11 revenue 70000',
      '2025-02-11 cost 79140',
      '2025-02-12 revenue 1534',
      '2025-02-12 cost 400',
    ]);
    const one = await client.get(`/money.csv?${RANGE}&tenant=${T.one.id}`);
    expect(
      one.text
        .trimEnd()
        .split('\r\n')
        .slice(1)
        .map((l) => l.split(',').slice(10, 13).join(' ')),
    ).toEqual(['0.040000 0.058140 -0.018140', '0.120000 0.119506 0.000494']);
    const brl = await client.get(`/money.csv?${RANGE}&model=${encodeURIComponent(M.brl)}`);
    expect(brl.text.trimEnd().split('\r\n')).toHaveLength(3);
    expect((await client.get('/money?from=2025-02-12&to=2025-02-10')).status).toBe(400);
    expect((await client.get('/money?from=2025-02-30&to=2025-03-01')).status).toBe(400);
  });

  it('shortfalls list the request that could not be debited in full', async () => {
    const res = await client.get('/shortfalls');
    const row = new RegExp(`data-testid="shortfall-row" data-request="m_r6_${u}">([\\s\\S]*?)</tr>`).exec(res.text)![1];
    expect(row).toContain(T.three.name);
    expect(row.match(/class="num">([^<]*)</g)!.map((m) => m.slice(12, -1))).toEqual(['R$ 0,005', 'R$ 0,0003', 'R$ 0,0047', 'R$ 0,00']);
    expect(row).toContain(`href="/tenants/${T.three.id}?request=m_r6_${u}"`);
  });
});

describe('a vendor cost set in the console', () => {
  it('is audited, shown in the catalog, and costs the requests made after it (today, São Paulo)', async () => {
    await upsertModel(admin, { id: M.form, pool: 'sim', upstream_model: 'echo', input_price: 5_000_000n, output_price: 15_000_000n, context_length: 8192 });
    const page = await client.get(`/catalog/models/${M.form}`);
    expect(page.status).toBe(200);
    const form = {
      _csrf: PortalClient.csrf(page.text),
      currency: 'USD',
      v_input: '2,5',
      v_cached: '',
      v_cache_write: '',
      v_cache_write_1h: '',
      v_output: '10',
      usd_brl: '',
    };
    const missingRate = await client.post(`/catalog/models/${M.form}/vendor-cost`, form);
    expect(missingRate.status).toBe(400);
    expect(missingRate.text).toContain('Informe o câmbio (R$ por US$).');
    const saved = await client.post(`/catalog/models/${M.form}/vendor-cost`, { ...form, usd_brl: '5,4321' });
    expect(saved).toMatchObject({ status: 303, location: `/catalog/models/${M.form}?done=vendor` });
    const { rows } = await admin.query('select action, target, operator_id, before, after from console_audit where target = $1', [M.form]);
    expect(rows).toEqual([
      {
        action: 'vendor_cost_change',
        target: M.form,
        operator_id: setup.operator.id,
        before: null,
        after: expect.objectContaining({
          currency: 'USD',
          input_price: '2500000',
          cached_input_price: null,
          output_price: '10000000',
          usd_brl_micros: '5432100',
        }),
      },
    ]);
    const exported = await client.get('/audit.csv?action=vendor_cost_change');
    expect(exported.headers.get('content-disposition')).toBe('attachment; filename="catraca-audit.csv"');
    const line = exported.text.split('\r\n').find((l) => l.includes(M.form))!;
    expect(line.split(',').slice(2, 5)).toEqual([setup.operator.id, setup.operator.email, 'vendor_cost_change']);
    expect(line).toContain('""usd_brl_micros"":""5432100""');
    expect((await client.get('/catalog')).text).toMatch(new RegExp(`data-model="${M.form}"[\\s\\S]*?data-testid="vendor-cost">US\\$ 2,50 / — / US\\$ 10,00`));
    // a request now: 100 in, 10 out → (100×2 500 000 + 10×10 000 000) × 5 432 100 = 1 901 235 000 000 000 → 1 901 µBRL
    await settle(admin, {
      requestId: `m_now_${u}`,
      tenantId: T.two.id,
      keyId: T.two.key,
      costMicros: 650n,
      model: M.form,
      inputTokens: 100,
      outputTokens: 10,
      estimated: false,
      outcome: 'completed',
      at: new Date(),
    });
    const today = defaultRange().to;
    const csv = await client.get(`/money.csv?from=${today}&to=${today}&model=${encodeURIComponent(M.form)}`);
    expect(csv.text.trimEnd().split('\r\n')[1].split(',').slice(10)).toEqual([
      '0.000650',
      '0.001901',
      '-0.001251',
      '0',
      '0',
      '0.000000',
      '0.000000',
      '0.000000',
    ]);
    // the tenants list: spend today and over 30 days is this request's
    const list = await client.get(`/tenants?q=${encodeURIComponent(T.two.name)}`);
    const row = new RegExp(`data-tenant-id="${T.two.id}">([\\s\\S]*?)</tr>`).exec(list.text)![1];
    expect(row.match(/class="num">([^<]*)</g)!.map((m) => m.slice(12, -1))).toEqual(['R$ 9,968116', 'R$ 0,00', 'R$ 0,00065', 'R$ 0,00065', '1']);
  });
});

describe('adjustments count against the request they name', () => {
  /**
   * Revenue = request debits − refunds (credit adjustments naming a request) + debit adjustments
   * naming a request, on the request's day × model × tenant, whenever the adjustment was made.
   * By hand (São Paulo 2025-03-05, BRL vendor cost 1.00 in / 2.00 out per 1M tokens):
   *   a1  debited 10 000; vendor (1000×1 000 000 + 500×2 000 000) × 10⁶ / 10¹² = 2 000
   *   a2  debited  6 000; vendor 1000×1 000 000 × 10⁶ / 10¹² = 1 000
   *   refund of a1 (a failed vendor call)   −4 000
   *   debit adjustment naming a2            +1 500
   *   a credit naming no request (700)       counts nowhere: it has no model
   *   revenue 10 000 + 6 000 − 4 000 + 1 500 = 13 500; cost 3 000; margin 10 500 (µBRL)
   */
  it('refunds lower revenue and margin, debit adjustments raise them', async () => {
    const model = `margin/adj-${u}`;
    const tenant = await createTenant(admin, `Margem Ajuste ${u}`);
    await credit(admin, { tenantId: tenant.id, amountMicros: 10_000_000n, source: 'grant', note: 'margin test' });
    const key = (await createApiKey(admin, { tenantId: tenant.id, label: 'margin' })).record.id;
    await admin.query(
      `insert into model_vendor_costs (model_id, valid_from, currency, input_price, output_price) values ($1, '2025-01-01', 'BRL', 1000000, 2000000)`,
      [model],
    );
    const reqs = [
      { id: `m_a1_${u}`, cost: 10_000n, input: 1000, output: 500 },
      { id: `m_a2_${u}`, cost: 6_000n, input: 1000, output: 0 },
    ];
    for (const r of reqs)
      await settle(admin, {
        requestId: r.id,
        tenantId: tenant.id,
        keyId: key,
        costMicros: r.cost,
        model,
        inputTokens: r.input,
        outputTokens: r.output,
        estimated: false,
        outcome: 'completed',
        at: new Date('2025-03-05T15:00:00Z'),
      });
    const adjust = async (kind: 'credit' | 'debit', amount: bigint, requestId: string | null) => {
      const { rows } = await consoleDb.query('select status from catraca_console_adjust($1, $2, $3, $4, $5, $6, null, $7, $8)', [
        setup.operator.id,
        '127.0.0.1',
        tenant.id,
        kind,
        amount,
        requestId,
        'margin test',
        randomBytes(8).toString('hex'),
      ]);
      expect(rows[0].status).toBe(kind === 'credit' ? 'credited' : 'debited');
    };
    await adjust('credit', 4_000n, reqs[0].id);
    await adjust('debit', 1_500n, reqs[1].id);
    await adjust('credit', 700n, null);
    const res = await client.get(`/money.csv?from=2025-03-05&to=2025-03-05&tenant=${tenant.id}`);
    const lines = res.text.trimEnd().split('\r\n').slice(1);
    expect(lines.map((l) => [l.split(',')[3], ...l.split(',').slice(4, 5), ...l.split(',').slice(10, 13)])).toEqual([
      [model, '2', '0.013500', '0.003000', '0.010500'],
    ]);
  });
});

describe('batch lines beside the online requests', () => {
  /**
   * Batch lines are debits naming their batch (ledger.batch_id); billed at the batch prices, costed at
   * the model's vendor cost (queue mode: their batch is not in vendor_batch_ids; vendor-mode lines at
   * the vendor's batch prices are in batch-margin.test.ts). By hand (São Paulo
   * 2025-03-07, BRL vendor cost 1.00 in / 2.00 out per 1M tokens):
   *   o1  online, debited 10 000; vendor (1000×1 000 000 + 500×2 000 000) × 10⁶ / 10¹² = 2 000
   *   b1  batch line, debited 5 000; same tokens: 2 000
   *   b2  batch line, debited 2 500; (333×1 000 000 + 111×2 000 000) × 10⁶ / 10¹² = 555
   *   batch: 2 lines, revenue 7 500, cost 2 555, margin 4 945
   *   all:   3 requests, revenue 17 500, cost 4 555, margin 12 945 (online = all − batch: 10 000 / 2 000)
   */
  it('the CSV, the page’s row and its batch totals', async () => {
    const model = `margin/batch-${u}`;
    const tenant = await createTenant(admin, `Margem Lote ${u}`);
    await credit(admin, { tenantId: tenant.id, amountMicros: 10_000_000n, source: 'grant', note: 'margin test' });
    const key = (await createApiKey(admin, { tenantId: tenant.id, label: 'margin' })).record.id;
    await admin.query(
      `insert into model_vendor_costs (model_id, valid_from, currency, input_price, output_price) values ($1, '2025-01-01', 'BRL', 1000000, 2000000)`,
      [model],
    );
    const batch = `batch_${'0'.repeat(12)}${u}abcd`;
    const reqs = [
      { id: `m_o1_${u}`, cost: 10_000n, input: 1000, output: 500, batchId: undefined },
      { id: `m_b1_${u}`, cost: 5_000n, input: 1000, output: 500, batchId: batch },
      { id: `m_b2_${u}`, cost: 2_500n, input: 333, output: 111, batchId: batch },
    ];
    for (const r of reqs)
      await settle(admin, {
        requestId: r.id,
        tenantId: tenant.id,
        keyId: key,
        costMicros: r.cost,
        model,
        inputTokens: r.input,
        outputTokens: r.output,
        estimated: false,
        outcome: 'completed',
        at: new Date('2025-03-07T15:00:00Z'),
        detail: { batchId: r.batchId },
      });
    const range = `from=2025-03-07&to=2025-03-07&tenant=${tenant.id}`;
    const lines = (await client.get(`/money.csv?${range}`)).text.trimEnd().split('\r\n').slice(1);
    expect(lines.map((l) => [l.split(',')[4], ...l.split(',').slice(10)])).toEqual([
      ['3', '0.017500', '0.004555', '0.012945', '0', '2', '0.007500', '0.002555', '0.004945'],
    ]);
    const page = (await client.get(`/money?${range}`)).text;
    const text = (id: string) => new RegExp(`data-testid="${id}">([^<]*)<`).exec(page)?.[1];
    expect(
      [
        'total-revenue',
        'total-cost',
        'total-margin',
        'batch-revenue',
        'batch-cost',
        'batch-margin',
        'row-batch-revenue',
        'row-batch-cost',
        'row-batch-margin',
      ].map(text),
    ).toEqual(['R$ 0,0175', 'R$ 0,004555', 'R$ 0,012945', 'R$ 0,0075', 'R$ 0,002555', 'R$ 0,004945', 'R$ 0,0075', 'R$ 0,002555', 'R$ 0,004945']);
    expect(page).toContain('65,9 % · 2 linhas de lotes');
  });

  it('a group without batch lines shows no batch figures', async () => {
    const page = (await client.get(`/money?${RANGE}&tenant=${T.two.id}`)).text;
    expect([...page.matchAll(/data-testid="row-batch-revenue">([^<]*)</g)].map((m) => m[1])).toEqual(['—', '—']);
    expect(/data-testid="batch-revenue">([^<]*)</.exec(page)?.[1]).toBe('R$ 0,00');
  });
});
