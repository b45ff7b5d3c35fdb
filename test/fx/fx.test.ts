import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { marginRows } from '../../src/console/money.ts';
import { createPool } from '../../src/db/pool.ts';
import { getModel, upsertModel, type ModelInput } from '../../src/db/models.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { FxService, fxStatus, pinRate } from '../../src/fx/service.ts';
import { startPtaxSimulator, type PtaxSimulator } from '../../src/fx/simulator.ts';
import { createMetrics, renderPrometheus } from '../../src/metrics/registry.ts';
import { saveUsdPrices } from '../../src/cli/commands/usd.ts';
import { run as runCli } from '../../src/cli/main.ts';
import { listDeployments } from '../../src/db/models.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';

// USD prices sold in BRL against the PTAX simulator and a database of the test's own (the rates
// are global): the exact BRL price at a known rate, a new rate recomputes and records it, the
// service down keeps the last rate and raises the metric, a pinned rate wins, the margin view
// costs a USD vendor price at the rate in force when the request was made.
describe('prices in dollars', () => {
  let own: OwnDatabase;
  let db: ReturnType<typeof createPool>;
  let ptax: PtaxSimulator;
  let fx: FxService;
  const metrics = createMetrics();
  const model = (id: string): ModelInput => ({
    id,
    pool: 'sim',
    protocol: 'sim',
    kind: 'chat',
    upstream_model: 'x',
    base_url: null,
    api_key_env: null,
    input_price: 1n,
    output_price: 1n,
    cached_input_price: null,
    cache_write_price: null,
    cache_write_1h_price: null,
    max_output_tokens: 4096,
    context_length: 128000,
    context_length_set: true,
    input_modalities: ['text'],
    image_input_tokens: null,
    extra_params: [],
    legacy_completions: false,
    reasoning: false,
    weight: 1,
    name: null,
    description: null,
  });

  beforeAll(async () => {
    own = await ownDatabase('fx', { migrate: true });
    db = createPool(own.url, 3);
    ptax = await startPtaxSimulator({ defaultSell: 5.4321 });
    fx = new FxService(db, { ptaxUrl: ptax.url, hour: 14, nc: null, metrics });
  });
  afterAll(async () => {
    await ptax?.close();
    await db?.end();
    await own?.drop();
  });

  it('USD × PTAX × markup → the exact BRL price; a new rate reprices; BRL-priced models are untouched', async () => {
    await upsertModel(db, model('vendor/usd'));
    await upsertModel(db, { ...model('vendor/brl'), input_price: 7_000_000n, output_price: 9_000_000n });
    await saveUsdPrices(db, 'vendor/usd', 'primary', {
      input_usd: 3_000_000n,
      output_usd: 15_000_000n,
      cached_input_usd: 300_000n,
      cache_write_usd: null,
      cache_write_1h_usd: null,
      markup_ppm: 1_300_000n,
    });
    const first = await fx.refresh();
    expect(first).toMatchObject({ ok: true, changed: ['vendor/usd'], rate: { micros: 5_432_100n, source: 'ptax' } });
    expect(await getModel(db, 'vendor/usd')).toMatchObject({
      input_price: 21_185_190n,
      output_price: 105_925_950n,
      cached_input_price: 2_118_519n,
      cache_write_price: null,
    });
    expect(await getModel(db, 'vendor/brl')).toMatchObject({ input_price: 7_000_000n, output_price: 9_000_000n });
    expect((await fx.refresh()).changed).toEqual([]); // the same rate: nothing to announce

    ptax.defaultSell = 5.5;
    const second = await fx.refresh();
    expect(second).toMatchObject({ changed: ['vendor/usd'], rate: { micros: 5_500_000n } });
    expect((await getModel(db, 'vendor/usd'))?.input_price).toBe(21_450_000n); // 3 × 5,5 × 1,3
    const rates = (await db.query(`select usd_brl_micros, source from fx_rates order by id`)).rows;
    expect(rates).toEqual([
      { usd_brl_micros: 5_432_100n, source: 'ptax' },
      { usd_brl_micros: 5_500_000n, source: 'ptax' },
    ]);
  });

  it('the service down keeps the last rate and says since when (metric, status); a pinned rate wins', async () => {
    ptax.down = true;
    const r = await fx.refresh();
    expect(r).toMatchObject({ ok: false, rate: { micros: 5_500_000n } });
    expect(r.error).toContain('HTTP 503');
    expect((await getModel(db, 'vendor/usd'))?.input_price).toBe(21_450_000n);
    const status = await fxStatus(db);
    expect(status.failingSince).toBeInstanceOf(Date);
    const since = status.failingSince!.getTime() / 1000;
    expect(renderPrometheus(metrics)).toContain(`catraca_ptax_failing_since_seconds ${since}`);
    await fx.refresh(); // still down: the same "since"
    expect((await fxStatus(db)).failingSince?.getTime()).toBe(status.failingSince!.getTime());

    ptax.down = false;
    await fx.refresh();
    expect((await fxStatus(db)).failingSince).toBeNull();
    expect(renderPrometheus(metrics)).toContain('catraca_ptax_failing_since_seconds 0');

    const pinned = await pinRate(db, 5_000_000n, 'op');
    expect(pinned.changed).toEqual(['vendor/usd']);
    expect((await getModel(db, 'vendor/usd'))?.input_price).toBe(19_500_000n);
    ptax.defaultSell = 6;
    expect((await fx.refresh()).changed).toEqual([]); // pinned: the PTAX does not move prices
    expect((await getModel(db, 'vendor/usd'))?.input_price).toBe(19_500_000n);
  });

  it('the CLI: model set and model deployment add in dollars with a markup, fx pin and --clear', async () => {
    const cli = async (...argv: string[]) => {
      let out = '';
      let err = '';
      const code = await runCli([...argv, '--json'], {
        env: { ...process.env, DATABASE_URL: own.url },
        stdout: (x) => (out += x),
        stderr: (x) => (err += x),
      });
      return { code, err, body: out ? JSON.parse(out) : null };
    };
    // the rate in force: R$ 5,00, pinned by the test before
    const set = await cli(
      'model',
      'set',
      '--id',
      'vendor/cli',
      '--pool',
      'sim',
      '--upstream-model',
      'echo',
      '--context-length',
      '8192',
      '--usd-input-price',
      '2.50',
      '--usd-output-price',
      '10',
      '--usd-cached-input-price',
      '0.25',
      '--markup',
      '1.25',
    );
    expect(set.code, set.err).toBe(0);
    expect(set.err).toContain('priced from USD at R$ 5.00 per dollar');
    // 2,50 × 5 × 1,25 = 15,625; 10 × 5 × 1,25 = 62,5; 0,25 × 5 × 1,25 = 1,5625
    expect(await getModel(db, 'vendor/cli')).toMatchObject({ input_price: 15_625_000n, output_price: 62_500_000n, cached_input_price: 1_562_500n });
    expect(
      (await db.query(`select input_usd, output_usd, cached_input_usd, markup_ppm, rate_micros from model_usd_prices where model_id = 'vendor/cli'`)).rows,
    ).toEqual([{ input_usd: 2_500_000n, output_usd: 10_000_000n, cached_input_usd: 250_000n, markup_ppm: 1_250_000n, rate_micros: 5_000_000n }]);
    // prices in both currencies at once, or a markup that is no factor: refused, nothing changed
    expect(
      (await cli('model', 'set', '--id', 'vendor/cli', '--pool', 'sim', '--input-price', '1', '--usd-input-price', '1', '--usd-output-price', '1')).code,
    ).toBe(2);
    expect(
      (await cli('model', 'set', '--id', 'vendor/cli', '--pool', 'sim', '--usd-input-price', '1', '--usd-output-price', '1', '--markup', '0.9')).code,
    ).toBe(2);
    expect((await getModel(db, 'vendor/cli'))?.input_price).toBe(15_625_000n);

    const dep = await cli(
      'model',
      'deployment',
      'add',
      '--model',
      'vendor/cli',
      '--name',
      'second',
      '--base-url',
      'https://second.example.com/v1',
      '--usd-input-price',
      '2',
      '--usd-output-price',
      '8',
      '--markup',
      '1.1',
    );
    expect(dep.code, dep.err).toBe(0);
    const second = () => listDeployments(db, 'vendor/cli').then((ds) => ds.find((d) => d.name === 'second'));
    expect(await second()).toMatchObject({ input_price: 11_000_000n, output_price: 44_000_000n }); // 2 × 5 × 1,1; 8 × 5 × 1,1

    // fx pin: every USD-priced entry repriced at once, the model and the deployment
    const pin = await cli('fx', 'pin', '--rate', '5.4321');
    expect(pin.code, pin.err).toBe(0);
    expect(pin.body).toEqual({ pinned: '5.4321', models_changed: expect.arrayContaining(['vendor/cli', 'vendor/usd']) });
    expect(await getModel(db, 'vendor/cli')).toMatchObject({ input_price: 16_975_313n, output_price: 67_901_250n, cached_input_price: 1_697_532n });
    expect(await second()).toMatchObject({ input_price: 11_950_620n, output_price: 47_802_480n }); // 2 × 5,4321 × 1,1 = 11,95062
    expect((await fxStatus(db)).pinnedMicros).toBe(5_432_100n);
    expect((await cli('fx', 'pin', '--rate', 'abc')).code).toBe(2);
    const clear = await cli('fx', 'pin', '--clear');
    expect(clear.code, clear.err).toBe(0);
    expect(clear.body).toEqual({ pinned: null });
    expect((await fxStatus(db)).pinnedMicros).toBeNull();
    // the console's job then takes the PTAX (R$ 6,00 on the simulator now)
    const back = await fx.refresh();
    expect(back).toMatchObject({ ok: true, rate: { micros: 6_000_000n, source: 'ptax' } });
    expect((await getModel(db, 'vendor/cli'))?.input_price).toBe(18_750_000n); // 2,5 × 6 × 1,25
    expect((await second())?.input_price).toBe(13_200_000n); // 2 × 6 × 1,1
  });

  it('the margin view costs a USD vendor price at the rate in force when the request was made', async () => {
    const t = await createTenant(db, 'margin');
    await db.query(
      `insert into model_vendor_costs (model_id, currency, input_price, output_price, usd_brl_micros, valid_from) values ('vendor/usd', 'USD', 3000000, 15000000, 9999999, now() - interval '10 days')`,
    );
    // two requests of 1M input tokens, one at each rate
    await db.query(
      `insert into fx_rates (rate_date, usd_brl_micros, source, valid_from) values ('2026-01-05', 5000000, 'ptax', '2026-01-05 16:00Z'), ('2026-01-06', 6000000, 'ptax', '2026-01-06 16:00Z')`,
    );
    for (const [id, at] of [
      ['r1', '2026-01-05 18:00Z'],
      ['r2', '2026-01-06 18:00Z'],
    ])
      await db.query(
        `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, model, input_tokens, output_tokens, created_at)
         values ($1, 'debit', 30000000, 0, 'request', $2, 'vendor/usd', 1000000, 0, $3)`,
        [t.id, id, at],
      );
    await db.query(`update model_vendor_costs set valid_from = '2026-01-01' where model_id = 'vendor/usd'`);
    const rows = await marginRows(db, { from: '2026-01-05', to: '2026-01-06', tenantId: t.id });
    expect(rows.map((r) => [r.day, r.vendor_cost_micros])).toEqual([
      ['2026-01-06', 18_000_000n], // US$ 3,00 × R$ 6,00
      ['2026-01-05', 15_000_000n], // US$ 3,00 × R$ 5,00
    ]);
  });
});
