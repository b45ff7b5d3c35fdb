import { Hono } from 'hono';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { parseAmountInput } from '../../billing/amount-input.ts';
import { subjects } from '../../bus/subjects.ts';
import { getModel, listDeployments, type ModelRecord, updateDeploymentPrices } from '../../db/models.ts';
import { withTransaction } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { type Form, one, redirect } from '../../web/http.ts';
import { audit } from '../audit.ts';
import { broadcast } from '../bus.ts';
import { currentVendorCosts, loadCatalog, setVendorCost, type VendorCostInput, vendorCostHistory, workerState } from '../catalog.ts';
import { type CCtx, type ConsoleEnv, operatorOf } from '../http.ts';
import type { T } from '../i18n/index.ts';
import type { ConsoleRenderer } from '../render.ts';
import { catalogPage, modelPage } from '../views/catalog.ts';
import { amountError } from './tenants.ts';

// The catalog: models and deployments with their prices, health and key variables; a model's sale
// prices (input, cached input, output: the only columns of models the console's role may update),
// then catalog.changed on NATS so every door and worker reloads at once, as after `catraca model
// set`; vendor costs for the margin views (online, and the vendor's batch prices for the lines of
// vendor-mode batches), with their history. Every change is audited.

const log = createLogger('console');
const MODEL = '/catalog/models/:vendor{[a-z0-9][a-z0-9._-]*}/:name{[A-Za-z0-9][A-Za-z0-9._:-]*}';

export interface CatalogRoutesDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
}

/** A price field: micro-BRL (or micro-USD) per 1M tokens; '' is null when `optional`. */
function priceField(t: T, form: Form, name: string, optional: boolean): { ok: true; value: bigint | null } | { ok: false; error: string } {
  const text = one(form, name).trim();
  if (!text) return optional ? { ok: true, value: null } : { ok: false, error: t('catalog.price_required') };
  const p = parseAmountInput(text, { maxDecimals: 6 });
  return p.ok ? { ok: true, value: p.micros } : { ok: false, error: amountError(t, p.error) };
}

function prices<K extends string>(t: T, form: Form, fields: Record<K, boolean>): { ok: true; values: Record<K, bigint | null> } | { ok: false; error: string } {
  const values = {} as Record<K, bigint | null>;
  for (const [name, optional] of Object.entries(fields) as Array<[K, boolean]>) {
    const p = priceField(t, form, name, optional);
    if (!p.ok) return p;
    values[name] = p.value;
  }
  return { ok: true, values };
}

const modelIdOf = (c: CCtx) => `${c.req.param('vendor')}/${c.req.param('name')}`;
type SalePrices = 'input_price' | 'cached_input_price' | 'output_price' | 'batch_input_price' | 'batch_cached_input_price' | 'batch_output_price';
const optionalPrice = (p: bigint | null) => (p === null ? null : String(p));
const priceSnapshot = (m: Pick<ModelRecord, SalePrices>) => ({
  input_price: String(m.input_price),
  cached_input_price: optionalPrice(m.cached_input_price),
  output_price: String(m.output_price),
  batch_input_price: optionalPrice(m.batch_input_price),
  batch_cached_input_price: optionalPrice(m.batch_cached_input_price),
  batch_output_price: optionalPrice(m.batch_output_price),
});

export function catalogRoutes(d: CatalogRoutesDeps, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const { db } = d;
  const app = new Hono<ConsoleEnv>();
  const show = async (c: CCtx, id: string, status = 200, o: { error?: string; form?: Record<string, string> } = {}) => {
    const model = await getModel(db, id);
    if (!model) return r.notFound(c);
    const [deployments, history] = await Promise.all([listDeployments(db, id), vendorCostHistory(db, id)]);
    const done = c.var.url.searchParams.get('done');
    const flash =
      done === 'prices' ? c.var.t('catalog.saved') : done === 'vendor' ? c.var.t('vendor.saved') : done === 'deployment' ? c.var.t('catalog.saved') : null;
    const warn = c.var.url.searchParams.has('nats') ? c.var.t('done.not_broadcast') : null;
    return r.page(c, status, id, (vc) => modelPage(vc, { model, deployments, vendorCost: history[0] ?? null, history, form: o.form }), {
      flash,
      error: o.error ?? warn,
    });
  };

  app.get('/catalog', async (c) => {
    const [models, workers] = await Promise.all([loadCatalog(db), workerState(d.nc)]);
    return r.page(c, 200, c.var.t('catalog.title'), (vc) => catalogPage(vc, { models, workers }));
  });
  app.get(MODEL, (c) => show(c, modelIdOf(c)));

  app.post(MODEL, async (c) => {
    const id = modelIdOf(c);
    const { t, form, ip } = c.var;
    const keep = {
      input_price: one(form, 'input_price'),
      cached_input_price: one(form, 'cached_input_price'),
      output_price: one(form, 'output_price'),
      batch_input_price: one(form, 'batch_input_price'),
      batch_cached_input_price: one(form, 'batch_cached_input_price'),
      batch_output_price: one(form, 'batch_output_price'),
      reason: one(form, 'reason'),
    };
    // the batch prices may be left empty: a batch line is then billed the online price
    const p = prices(t, form, {
      input_price: false,
      cached_input_price: true,
      output_price: false,
      batch_input_price: true,
      batch_cached_input_price: true,
      batch_output_price: true,
    });
    if (!p.ok) return show(c, id, 400, { error: p.error, form: keep });
    const operatorId = operatorOf(c).operator.id;
    const saved = await withTransaction(db, async (tx) => {
      await tx.query('select 1 from models where id = $1 for update', [id]);
      const prev = await getModel(tx, id);
      if (!prev) return null;
      // the sale prices only: the console's role may update no other column of a model
      const v = p.values;
      const { rows } = await tx.query(
        `update models set input_price = $2, output_price = $3, cached_input_price = $4,
                           batch_input_price = $5, batch_cached_input_price = $6, batch_output_price = $7, updated_at = now() where id = $1
         returning input_price, cached_input_price, output_price, batch_input_price, batch_cached_input_price, batch_output_price`,
        [id, v.input_price!, v.output_price!, v.cached_input_price, v.batch_input_price, v.batch_cached_input_price, v.batch_output_price],
      );
      const res = { model: rows[0] as Pick<ModelRecord, SalePrices> };
      await audit(tx, {
        operatorId,
        action: 'price_change',
        ip,
        target: id,
        reason: one(form, 'reason').trim().slice(0, 500) || null,
        before: priceSnapshot(prev),
        after: priceSnapshot(res.model),
      });
      return res.model;
    });
    if (!saved) return r.notFound(c);
    log.info('console: model prices changed', { operator: operatorId, model: id });
    const told = await broadcast(d.nc, subjects.catalogChanged, { model: id });
    return redirect(c, `/catalog/models/${id}?done=prices${told ? '' : '&nats=0'}`);
  });

  app.post(`${MODEL}/vendor-cost`, (c) => saveVendorCost(c, db, show));
  app.post('/catalog/deployments/:id{[A-Za-z0-9_-]{1,64}}', (c) => saveDeployment(c, d, r, show));
  return app;
}

type Show = (c: CCtx, id: string, status?: number, o?: { error?: string; form?: Record<string, string> }) => Promise<Response>;

async function saveVendorCost(c: CCtx, db: pg.Pool, show: Show): Promise<Response> {
  const id = modelIdOf(c);
  const { t, form, ip } = c.var;
  const keep = Object.fromEntries(
    [
      'currency',
      'v_input',
      'v_cached',
      'v_cache_write',
      'v_cache_write_1h',
      'v_output',
      'usd_brl',
      'v_batch_input',
      'v_batch_cached',
      'v_batch_cache_write',
      'v_batch_cache_write_1h',
      'v_batch_output',
    ].map((k) => [k, one(form, k)]),
  );
  const currency = one(form, 'currency');
  if (currency !== 'USD' && currency !== 'BRL') return show(c, id, 400, { error: t('vendor.bad_currency'), form: keep });
  // the batch prices (the vendor's own batch API, vendor mode) are all optional: empty is the online price
  const p = prices(t, form, {
    v_input: false,
    v_cached: true,
    v_cache_write: true,
    v_cache_write_1h: true,
    v_output: false,
    usd_brl: true,
    v_batch_input: true,
    v_batch_cached: true,
    v_batch_cache_write: true,
    v_batch_cache_write_1h: true,
    v_batch_output: true,
  });
  if (!p.ok) return show(c, id, 400, { error: p.error, form: keep });
  if (currency === 'USD' && !p.values.usd_brl) return show(c, id, 400, { error: t('vendor.rate_required'), form: keep });
  const cost: VendorCostInput = {
    currency,
    input_price: p.values.v_input!,
    cached_input_price: p.values.v_cached,
    cache_write_price: p.values.v_cache_write,
    cache_write_1h_price: p.values.v_cache_write_1h,
    output_price: p.values.v_output!,
    usd_brl_micros: currency === 'USD' ? p.values.usd_brl : null,
    batch_input_price: p.values.v_batch_input,
    batch_cached_input_price: p.values.v_batch_cached,
    batch_cache_write_price: p.values.v_batch_cache_write,
    batch_cache_write_1h_price: p.values.v_batch_cache_write_1h,
    batch_output_price: p.values.v_batch_output,
  };
  const operatorId = operatorOf(c).operator.id;
  const saved = await withTransaction(db, async (tx) => {
    if (!(await getModel(tx, id))) return false;
    const before = (await currentVendorCosts(tx)).get(id) ?? null;
    const after = await setVendorCost(tx, id, cost, operatorId);
    const snap = (v: typeof before) =>
      v &&
      Object.fromEntries(
        Object.entries(v)
          .map(([k, x]) => [k, typeof x === 'bigint' ? String(x) : x])
          .filter(([k]) => k !== 'set_by' && k !== 'model_id'),
      );
    await audit(tx, { operatorId, action: 'vendor_cost_change', ip, target: id, before: snap(before), after: snap(after) });
    return true;
  });
  if (!saved) return show(c, id, 404);
  return redirect(c, `/catalog/models/${id}?done=vendor`);
}

async function saveDeployment(c: CCtx, d: CatalogRoutesDeps, r: ConsoleRenderer, show: Show): Promise<Response> {
  const depId = c.req.param('id')!;
  const { t, form, ip } = c.var;
  const { rows } = await d.db.query('select model_id from model_deployments where id = $1', [depId]);
  if (!rows[0]) return r.notFound(c);
  const modelId = rows[0].model_id as string;
  const back = (error: string) => show(c, modelId, 400, { error });
  const p = prices(t, form, { input_price: true, cached_input_price: true, output_price: true });
  if (!p.ok) return back(p.error);
  const weight = Number(one(form, 'weight'));
  if (!Number.isInteger(weight) || weight < 1 || weight > 1000) return back(t('catalog.bad_weight'));
  const operatorId = operatorOf(c).operator.id;
  await withTransaction(d.db, async (tx) => {
    const before = (await tx.query('select input_price, output_price, cached_input_price, weight from model_deployments where id = $1 for update', [depId]))
      .rows[0];
    const after = await updateDeploymentPrices(tx, depId, {
      input_price: p.values.input_price,
      output_price: p.values.output_price,
      cached_input_price: p.values.cached_input_price,
      weight,
    });
    const snap = (x: { input_price: bigint | null; output_price: bigint | null; cached_input_price: bigint | null; weight: number }) => ({
      input_price: x.input_price === null ? null : String(x.input_price),
      cached_input_price: x.cached_input_price === null ? null : String(x.cached_input_price),
      output_price: x.output_price === null ? null : String(x.output_price),
      weight: x.weight,
    });
    await audit(tx, {
      operatorId,
      action: 'deployment_price_change',
      ip,
      target: depId,
      reason: one(form, 'reason').trim().slice(0, 500) || null,
      before: snap(before),
      after: snap(after!),
    });
  });
  const told = await broadcast(d.nc, subjects.catalogChanged, { model: modelId });
  return redirect(c, `/catalog/models/${modelId}?done=deployment${told ? '' : '&nats=0'}`);
}
