import { Hono } from 'hono';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { parseAmountInput } from '../../billing/amount-input.ts';
import { subjects } from '../../bus/subjects.ts';
import { withTransaction } from '../../db/pool.ts';
import { currentRate, fxStatus, pinRateIn, unpinRate } from '../../fx/service.ts';
import { createLogger } from '../../log.ts';
import { one, redirect } from '../../web/http.ts';
import { audit } from '../audit.ts';
import { broadcast } from '../bus.ts';
import { type CCtx, type ConsoleEnv, operatorOf } from '../http.ts';
import type { ConsoleRenderer } from '../render.ts';
import { fxPage } from '../views/fx.ts';
import { amountError } from './tenants.ts';

// "Taxa do dólar" (src/fx/): the rate in force, the PTAX job's state, and an operator pinning a
// rate (USD-priced models repriced at once and announced like any price change) or going back to
// the PTAX (the console's job takes the last published rate within a minute), as
// `catraca fx pin` does. Both audited (fx_pin) in the transaction of the change.

const log = createLogger('console');
/** Above this a typed rate is a mistake (R$ per US$). */
const MAX_RATE_MICROS = 100_000_000n;

const snapshot = (rate: { micros: bigint; source: string; date: string } | null, pinned: bigint | null) => ({
  rate: rate ? String(rate.micros) : null,
  source: rate?.source ?? null,
  date: rate?.date ?? null,
  pinned: pinned === null ? null : String(pinned),
});

export function fxRoutes(d: { db: pg.Pool; nc: NatsConnection | null }, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const { db } = d;
  const app = new Hono<ConsoleEnv>();
  const show = async (c: CCtx, status = 200, o: { error?: string; form?: { rate?: string; reason?: string } } = {}) => {
    const [rate, st, history, usd] = await Promise.all([
      currentRate(db),
      fxStatus(db),
      db.query(`select usd_brl_micros, rate_date::text as rate_date, source, valid_from, set_by from fx_rates order by valid_from desc, id desc limit 30`),
      db.query('select count(*)::int as n from model_usd_prices'),
    ]);
    const done = c.var.url.searchParams.get('done');
    const t = c.var.t;
    const flash = done === 'pinned' ? t('fx.pinned', { n: c.var.url.searchParams.get('n') ?? '0' }) : done === 'unpinned' ? t('fx.unpinned') : null;
    const warn = c.var.url.searchParams.has('nats') ? t('done.not_broadcast') : null;
    return r.page(c, status, t('fx.title'), (vc) => fxPage(vc, { rate, status: st, history: history.rows, usdModels: usd.rows[0].n, form: o.form }), {
      flash,
      error: o.error ?? warn,
    });
  };

  app.get('/fx', (c) => show(c));

  app.post('/fx/pin', async (c) => {
    const { t, form, ip } = c.var;
    const keep = { rate: one(form, 'rate'), reason: one(form, 'reason') };
    const parsed = parseAmountInput(keep.rate, { maxDecimals: 6, maxIntegerDigits: 3 });
    if (!parsed.ok) return show(c, 400, { error: amountError(t, parsed.error), form: keep });
    if (parsed.micros <= 0n || parsed.micros > MAX_RATE_MICROS) return show(c, 400, { error: t('fx.bad_rate'), form: keep });
    const reason = keep.reason.trim().slice(0, 500);
    if (!reason) return show(c, 400, { error: t('common.reason_required'), form: keep });
    const { operator } = operatorOf(c);
    const out = await withTransaction(db, async (tx) => {
      const before = snapshot(await currentRate(tx), (await fxStatus(tx)).pinnedMicros);
      const pinned = await pinRateIn(tx, parsed.micros, operator.email);
      await audit(tx, {
        operatorId: operator.id,
        action: 'fx_pin',
        ip,
        target: 'usd_brl',
        reason,
        before,
        after: { ...snapshot(pinned.rate, parsed.micros), models_repriced: pinned.changed },
      });
      return pinned;
    });
    log.info('console: dollar rate pinned', { operator: operator.id, rate_micros: String(parsed.micros), models_repriced: out.changed.length });
    let told = true;
    for (const model of out.changed) told = (await broadcast(d.nc, subjects.catalogChanged, { model })) && told;
    return redirect(c, `/fx?done=pinned&n=${out.changed.length}${told ? '' : '&nats=0'}`);
  });

  app.post('/fx/unpin', async (c) => {
    const { t, form, ip } = c.var;
    const reason = one(form, 'reason').trim().slice(0, 500);
    if (!reason) return show(c, 400, { error: t('common.reason_required') });
    const { operator } = operatorOf(c);
    const unpinned = await withTransaction(db, async (tx) => {
      const st = await fxStatus(tx);
      if (st.pinnedMicros === null) return false;
      await unpinRate(tx, operator.email);
      await audit(tx, {
        operatorId: operator.id,
        action: 'fx_pin',
        ip,
        target: 'usd_brl',
        reason,
        before: snapshot(await currentRate(tx), st.pinnedMicros),
        after: { pinned: null },
      });
      return true;
    });
    if (!unpinned) return show(c, 409, { error: t('fx.not_pinned') });
    log.info('console: dollar rate unpinned', { operator: operator.id });
    return redirect(c, '/fx?done=unpinned');
  });
  return app;
}
