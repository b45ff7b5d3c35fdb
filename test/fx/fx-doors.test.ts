// A new dollar rate on both front doors (issue 29), against the PTAX simulator, two doors, a worker,
// metering and the console, on a database of this file's own (the rate is database-wide): the
// day's PTAX reprices a USD-priced model, announced like any price change, so a request admitted
// before it is billed at the old price and requests admitted after it, on either door, at the new
// one; an operator pins a rate with the console's "Taxa do dólar" form (CSRF as every form,
// audited), then goes back to the PTAX; /v1/models keeps BRL prices; the portal's model page shows
// the rate and the date the price was set; the service down raises the console's banner.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { costMicros, type Prices } from '../../src/billing/money.ts';
import { saveUsdPrices } from '../../src/cli/commands/usd.ts';
import { createOperator, type OperatorSetup, totpFor } from '../../src/console/auth.ts';
import { type ConsoleServer, startConsole } from '../../src/console/server.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { FxService, fxStatus } from '../../src/fx/service.ts';
import { type PtaxSimulator, startPtaxSimulator } from '../../src/fx/simulator.ts';
import { createSession, signUp } from '../../src/portal/auth.ts';
import { type Portal, startPortal } from '../../src/portal/server.ts';
import { type OwnDatabase, ownDatabase } from '../helpers/own-database.ts';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { PortalClient } from '../portal/client.ts';

const MODEL = 'usd/lorem';
// US$ 1,00 in and US$ 2,00 out per 1M tokens, markup 1,30
const USD = { input_usd: 1_000_000n, output_usd: 2_000_000n, cached_input_usd: null, cache_write_usd: null, cache_write_1h_usd: null, markup_ppm: 1_300_000n };
// BRL = ceil(USD × rate × markup) per 1M tokens
const AT_5_00: Prices = { input: 6_500_000n, output: 13_000_000n }; // 1 × 5,00 × 1,3; 2 × 5,00 × 1,3
const AT_5_50: Prices = { input: 7_150_000n, output: 14_300_000n }; // 1 × 5,50 × 1,3; 2 × 5,50 × 1,3
const AT_6_0123: Prices = { input: 7_815_990n, output: 15_631_980n }; // 1 × 6,0123 × 1,3 = 7,81599; × 2

describe('a new dollar rate on both front doors', () => {
  let own: OwnDatabase;
  let stack: TestStack;
  let ptax: PtaxSimulator;
  let consoleDb: pg.Pool;
  let fx: FxService;
  let server: ConsoleServer;
  let tenant: { tenantId: string; key: string };

  beforeAll(async () => {
    own = await ownDatabase('fxdoors', { migrate: true });
    ptax = await startPtaxSimulator({ defaultSell: 5 });
    stack = await startStack({ gateways: 2, workers: 1, databaseUrl: own.url });
    consoleDb = createPool(derivedRoleUrl(own.url, 'console'), 4);
    // the console's PTAX job, as console/main.ts runs it (refresh() is what its daily tick calls)
    fx = new FxService(consoleDb, { ptaxUrl: ptax.url, hour: 14, nc: stack.nc });
    server = await startConsole({ db: consoleDb, nc: stack.nc, port: 0 });
    await upsertModel(stack.db, { id: MODEL, pool: 'sim', upstream_model: 'lorem', input_price: 1n, output_price: 1n });
    await saveUsdPrices(stack.db, MODEL, 'primary', USD);
    expect(await fx.refresh()).toMatchObject({ ok: true, changed: [MODEL], rate: { micros: 5_000_000n, source: 'ptax' } });
    // a key that holds per request (its hold shows the request admitted)
    tenant = await stack.tenant('10.00', { rateLimitRequests: 1000, rateLimitIntervalS: 60 });
  }, 120_000);

  afterAll(async () => {
    await server?.close();
    await consoleDb?.end();
    await stack?.stop();
    await ptax?.close();
    await own?.drop();
  }, 60_000);

  const chat = (door: number, extra: Record<string, unknown> = {}) =>
    fetch(`${stack.urlOf(stack.gateways[door])}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 12, messages: [{ role: 'user', content: 'quanto custa?' }], ...extra }),
    });
  /** The one debit of a request, and what its tokens cost at `prices`. */
  const billed = async (res: Response, prices: Prices) => {
    expect(res.status).toBe(200);
    await res.text();
    const id = res.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const { rows } = await stack.db.query(`select amount_micros, input_tokens, output_tokens from ledger where request_id = $1 and kind = 'debit'`, [id]);
    expect(rows).toHaveLength(1);
    expect(rows[0].output_tokens).toBeGreaterThan(0);
    return { debited: rows[0].amount_micros as bigint, at: costMicros(rows[0].input_tokens, rows[0].output_tokens, prices) };
  };
  const bothDoorsBillAt = async (prices: Prices) => {
    for (const door of [0, 1]) {
      const b = await billed(await chat(door), prices);
      expect(b.debited).toBe(b.at);
    }
  };
  const openHold = async (timeoutMs = 5000) => {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      if ((await stack.db.query('select 1 from holds where tenant_id = $1', [tenant.tenantId])).rowCount) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('no hold appeared');
  };
  /** What a door does `ms` after the change is what it does within that much of it. */
  const until = (since: number, ms: number) => new Promise((r) => setTimeout(r, Math.max(0, since + ms - Date.now())));
  const prices = async () =>
    (await stack.db.query('select input_price, output_price from models where id = $1', [MODEL])).rows[0] as { input_price: bigint; output_price: bigint };

  it('the day’s PTAX: a request admitted before is billed at the old price, those admitted after at the new one on both doors', async () => {
    await bothDoorsBillAt(AT_5_00);
    // /v1/models keeps showing BRL prices
    const listed = await fetch(`${stack.urlOf(stack.gateways[1])}/models`, { headers: { authorization: `Bearer ${tenant.key}` } });
    const entry = ((await listed.json()) as { data: Array<{ id: string; pricing: Record<string, string> }> }).data.find((m) => m.id === MODEL)!;
    expect(entry.pricing).toMatchObject({ prompt: '0.0000065', completion: '0.000013', currency: 'BRL' });

    // a slow stream admitted on door 1 (3 s), then the new rate
    let ended = false;
    const inFlight = chat(1, { stream: true, max_tokens: 30, sim: { tokens_per_second: 10 } }).then(async (res) => {
      const text = await res.text();
      ended = true;
      return { res, text };
    });
    await openHold();
    ptax.defaultSell = 5.5;
    const refreshed = await fx.refresh();
    const changedAt = Date.now();
    expect(refreshed).toMatchObject({ ok: true, changed: [MODEL], rate: { micros: 5_500_000n, source: 'ptax' } });
    expect(await prices()).toEqual({ input_price: AT_5_50.input, output_price: AT_5_50.output });
    expect(ended).toBe(false); // the change landed while the request was in flight

    await until(changedAt, 500);
    await bothDoorsBillAt(AT_5_50);
    const old = await inFlight;
    const id = old.res.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const { rows } = await stack.db.query(`select amount_micros, input_tokens, output_tokens from ledger where request_id = $1 and kind = 'debit'`, [id]);
    expect(rows[0].output_tokens).toBeGreaterThan(12);
    expect(rows[0].amount_micros).toBe(costMicros(rows[0].input_tokens, rows[0].output_tokens, AT_5_00));
  }, 60_000);

  describe('the console’s “Taxa do dólar”', () => {
    let op: OperatorSetup;
    let client: PortalClient;

    beforeAll(async () => {
      const r = await createOperator(stack.db, { email: `fx.${randomBytes(4).toString('hex')}@example.com`, createdBy: null });
      if (!r.ok) throw new Error(r.error);
      op = r.setup;
      client = new PortalClient(server.url);
      const token = PortalClient.csrf((await client.get('/login')).text);
      const code = totpFor(op.totpSecret, op.operator.email).generate();
      expect(await client.post('/login', { _csrf: token, email: op.operator.email, password: op.password, code })).toMatchObject({
        status: 303,
        location: '/tenants',
      });
    });

    it('pins a rate: CSRF as every form, audited, repriced and announced to both doors; back to the PTAX', async () => {
      const page = await client.get('/fx');
      expect(page.status).toBe(200);
      expect(page.text).toContain('<dd data-testid="fx-rate">R$ 5,5000</dd>');
      expect(page.text).toContain('Fixar taxa');
      const token = PortalClient.csrf(page.text);

      // without the session's token, or from another origin: 403, nothing pinned
      expect((await client.post('/fx/pin', { rate: '6,0123', reason: 'sem token' })).status).toBe(403);
      expect((await client.post('/fx/pin', { _csrf: token, rate: '6,0123', reason: 'origem' }, { origin: 'http://evil.example' })).status).toBe(403);
      // a rate that is no rate, a missing reason: 400, nothing pinned
      const bad = await client.post('/fx/pin', { _csrf: token, rate: '0', reason: 'zero' });
      expect(bad.status).toBe(400);
      expect(bad.text).toContain('Informe a taxa em reais por dólar, como 5,4321.');
      expect((await client.post('/fx/pin', { _csrf: token, rate: '6,0123', reason: ' ' })).status).toBe(400);
      expect((await fxStatus(stack.db)).pinnedMicros).toBeNull();
      expect(await prices()).toEqual({ input_price: AT_5_50.input, output_price: AT_5_50.output });

      const pinned = await client.post('/fx/pin', { _csrf: token, rate: '6,0123', reason: 'PTAX atrasada no feriado' });
      const changedAt = Date.now();
      expect(pinned).toMatchObject({ status: 303, location: '/fx?done=pinned&n=1' });
      expect(await prices()).toEqual({ input_price: AT_6_0123.input, output_price: AT_6_0123.output });
      expect((await fxStatus(stack.db)).pinnedMicros).toBe(6_012_300n);
      const audit = await stack.db.query(`select operator_id, action, target, reason, before, after from console_audit where action = 'fx_pin' order by id`);
      expect(audit.rows).toEqual([
        {
          operator_id: op.operator.id,
          action: 'fx_pin',
          target: 'usd_brl',
          reason: 'PTAX atrasada no feriado',
          before: { rate: '5500000', source: 'ptax', date: expect.stringMatching(/^\d{4}-\d\d-\d\d$/), pinned: null },
          after: { rate: '6012300', source: 'pinned', date: expect.stringMatching(/^\d{4}-\d\d-\d\d$/), pinned: '6012300', models_repriced: [MODEL] },
        },
      ]);
      const shown = await client.get('/fx?done=pinned&n=1');
      expect(shown.text).toContain('Taxa fixada; 1 modelo(s) com novo preço, anunciado às portas.');
      expect(shown.text).toContain('<dd data-testid="fx-rate">R$ 6,0123</dd>');
      expect(shown.text).toContain(`<td>${op.operator.email}</td>`);
      await until(changedAt, 500);
      await bothDoorsBillAt(AT_6_0123);
      // while pinned, the day's PTAX moves nothing
      expect((await fx.refresh()).changed).toEqual([]);

      // back to the PTAX: audited; the console's job takes the published rate
      const unpinned = await client.post('/fx/unpin', { _csrf: PortalClient.csrf(shown.text), reason: 'PTAX publicada' });
      expect(unpinned).toMatchObject({ status: 303, location: '/fx?done=unpinned' });
      expect((await fxStatus(stack.db)).pinnedMicros).toBeNull();
      const last = await stack.db.query(`select reason, before, after from console_audit where action = 'fx_pin' order by id desc limit 1`);
      expect(last.rows[0]).toEqual({
        reason: 'PTAX publicada',
        before: { rate: '6012300', source: 'pinned', date: expect.any(String), pinned: '6012300' },
        after: { pinned: null },
      });
      expect((await client.post('/fx/unpin', { _csrf: PortalClient.csrf(shown.text), reason: 'de novo' })).status).toBe(409);
      const back = await fx.refresh();
      const backAt = Date.now();
      expect(back).toMatchObject({ changed: [MODEL], rate: { micros: 5_500_000n, source: 'ptax' } });
      await until(backAt, 500);
      await bothDoorsBillAt(AT_5_50);
    }, 60_000);

    it('the PTAX down: the last rate stays and every page says since when', async () => {
      ptax.down = true;
      expect(await fx.refresh()).toMatchObject({ ok: false, rate: { micros: 5_500_000n } });
      const since = (await fxStatus(stack.db)).failingSince!;
      const text = new Intl.DateTimeFormat('pt-BR', { timeZone: 'America/Sao_Paulo', dateStyle: 'short', timeStyle: 'short' }).format(since);
      for (const path of ['/fx', '/tenants']) {
        const page = await client.get(path);
        expect(page.text).toContain(
          `<p class="error" role="alert" data-testid="ptax-banner">A PTAX do dólar não pode ser obtida desde ${text}: os modelos com preço em dólar mantêm a última taxa (fixe uma em Taxa do dólar ou com catraca fx pin).</p>`,
        );
      }
      expect(await prices()).toEqual({ input_price: AT_5_50.input, output_price: AT_5_50.output });
      ptax.down = false;
      await fx.refresh();
      expect((await client.get('/fx')).text).not.toContain('ptax-banner');
    });
  });

  it('the portal’s model page: the rate and the date the price was set; BRL-priced models as they were', async () => {
    let portal: Portal | undefined;
    const portalDb = createPool(derivedRoleUrl(own.url, 'portal'), 3);
    try {
      portal = await startPortal({ db: portalDb, nc: null, env: { PIX_PROVIDER: 'simulator' }, reconcileIntervalMs: 0, nfse: false });
      const signed = await signUp(stack.db, { email: `fx.${randomBytes(4).toString('hex')}@example.com`, password: 'senha-do-dolar-123', ip: '198.51.100.9' });
      if (!signed.ok) throw new Error(signed.error);
      const session = await createSession(stack.db, signed.user.id);
      const res = await fetch(`${portal.url}/models`, { headers: { cookie: `catraca_session=${session.token}` }, redirect: 'manual' });
      expect(res.status).toBe(200);
      const text = await res.text();
      // the rate in force (5,50, the day's PTAX) and the day the BRL price last changed (São Paulo)
      const { rows } = await stack.db.query(
        `select to_char(rate_date, 'DD/MM/YYYY') as rate_day, to_char(priced_at at time zone 'America/Sao_Paulo', 'DD/MM/YYYY') as priced_day
           from model_usd_prices where model_id = $1`,
        [MODEL],
      );
      expect(text).toContain(
        `<small data-testid="model-fx">Preço em dólar, convertido a R$ 5,5000 por US$ (taxa de ${rows[0].rate_day}); preço desde ${rows[0].priced_day}</small>`,
      );
      expect(text.match(/data-testid="model-fx"/g)).toHaveLength(1); // sim/echo and sim/lorem are priced in reais
      expect(text).toContain('R$ 7,15');
    } finally {
      await portal?.close();
      await portalDb.end();
    }
  });
});
