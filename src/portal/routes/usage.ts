import { Hono } from 'hono';
import type pg from 'pg';
import { listModels } from '../../db/models.ts';
import { getTenant } from '../../db/tenants.ts';
import { type AppEnv, type Ctx, tenantOf } from '../http.ts';
import type { MessageKey } from '../i18n/index.ts';
import type { Renderer } from '../render.ts';
import { MAX_PERIOD_DAYS, parsePeriod } from '../period.ts';
import { dailySpend, ledgerPage, spendByEndUser, spendByKey, spendByModel } from '../usage.ts';
import { can } from '../authorize.ts';
import { messagePage } from '../views/layout.ts';
import { dashboardPage, ledgerPage as ledgerView, modelsPage, type UsdPricing } from '../views/usage.ts';

// What the tenant has and spent: the dashboard, the ledger, the model price list.

export interface UsageDeps {
  db: pg.Pool;
  /** The gateway's public URL, shown on the dashboard. */
  gatewayUrl: string;
}

export function usageRoutes(d: UsageDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  app.get('/dashboard', can('usage'), async (c) => {
    const tenantId = tenantOf(c);
    const asked = parsePeriod(c.var.url.searchParams);
    if (!asked.ok) return badPeriod(c, r, asked.error);
    const { period, preset } = asked;
    const [tenant, days, byModel, byKey, byEndUser] = await Promise.all([
      getTenant(db, tenantId),
      dailySpend(db, tenantId, period),
      spendByModel(db, tenantId, period),
      spendByKey(db, tenantId, period),
      spendByEndUser(db, tenantId, period),
    ]);
    return r.page(c, 200, c.var.t('dash.title'), (vc) =>
      dashboardPage(vc, {
        balance: tenant!.balance_micros,
        held: tenant!.held_micros,
        gatewayUrl: d.gatewayUrl,
        period,
        preset,
        days,
        byModel,
        byKey,
        byEndUser,
      }),
    );
  });
  app.get('/ledger', can('statement'), async (c) => {
    const p = Math.min(Math.max(1, Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1), 100000);
    const res = await ledgerPage(db, tenantOf(c), p);
    return r.page(c, 200, c.var.t('ledger.title'), (vc) => ledgerView(vc, res.rows, p, res.hasMore));
  });
  app.get('/models', can('usage'), async (c) => {
    const models = await listModels(db);
    // USD-priced models: the dollar's rate, its date, and the day their BRL price was set (docs/billing.md)
    const { rows } = await db.query(
      `select model_id, rate_micros, rate_date::text as rate_date, (priced_at at time zone 'America/Sao_Paulo')::date::text as priced_on
         from model_usd_prices where deployment = 'primary' and rate_micros is not null`,
    );
    const rates = new Map<string, UsdPricing>(
      rows.map((x) => [x.model_id, { rate: BigInt(x.rate_micros), date: x.rate_date, pricedOn: x.priced_on ?? x.rate_date }]),
    );
    return r.page(c, 200, c.var.t('models.title'), (vc) => modelsPage(vc, models, rates));
  });
  return app;
}

/** A period the dashboard or an export cannot show: a 400 page saying what is wrong. */
export function badPeriod(c: Ctx, r: Renderer, error: MessageKey): Promise<Response> {
  const { t } = c.var;
  return r.page(c, 400, t('period.bad_title'), (vc) =>
    messagePage(vc, t('period.bad_title'), t(error, { max: MAX_PERIOD_DAYS }), { href: '/dashboard', label: t('dash.title') }),
  );
}
