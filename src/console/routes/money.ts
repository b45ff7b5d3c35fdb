import { Hono } from 'hono';
import type pg from 'pg';
import { formatBrl } from '../../billing/money.ts';
import { send } from '../../web/http.ts';
import { csv } from '../csv.ts';
import type { CCtx, ConsoleEnv } from '../http.ts';
import { dayTotals, type MarginFilter, marginRows, parseRange, shortfalls, totals } from '../money.ts';
import type { ConsoleRenderer } from '../render.ts';
import { messagePage } from '../views/layout.ts';
import { moneyPage, shortfallsPage } from '../views/money.ts';

// Revenue, vendor cost and margin per São Paulo day × model × tenant (page and CSV); shortfalls.

function filterOf(c: CCtx): MarginFilter | null {
  const q = c.var.url.searchParams;
  const range = parseRange(q.get('from'), q.get('to'));
  if (!range) return null;
  const tenantId = (q.get('tenant') ?? '').trim().slice(0, 100);
  const model = (q.get('model') ?? '').trim().slice(0, 200);
  return { ...range, tenantId: tenantId || undefined, model: model || undefined };
}

export function moneyRoutes(db: pg.Pool, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  const badRange = (c: CCtx) => r.page(c, 400, c.var.t('money.title'), (vc) => messagePage(vc, '400', c.var.t('money.bad_range')));

  app.get('/money', async (c) => {
    const f = filterOf(c);
    if (!f) return badRange(c);
    const rows = await marginRows(db, f);
    const q = new URLSearchParams({ from: f.from, to: f.to, ...(f.tenantId ? { tenant: f.tenantId } : {}), ...(f.model ? { model: f.model } : {}) });
    return r.page(c, 200, c.var.t('money.title'), (vc) =>
      moneyPage(vc, {
        from: f.from,
        to: f.to,
        tenantId: f.tenantId ?? '',
        model: f.model ?? '',
        rows,
        days: dayTotals(rows, f.from, f.to),
        totals: totals(rows),
        csvHref: `/money.csv?${q.toString()}`,
      }),
    );
  });

  app.get('/money.csv', async (c) => {
    const f = filterOf(c);
    if (!f) return badRange(c);
    const rows = await marginRows(db, f);
    const body = csv(
      [
        'day',
        'tenant_id',
        'tenant',
        'model',
        'requests',
        'input_tokens',
        'cached_tokens',
        'cache_write_tokens',
        'output_tokens',
        'reasoning_tokens',
        'revenue_brl',
        'vendor_cost_brl',
        'margin_brl',
        'uncosted_requests',
        'batch_requests',
        'batch_revenue_brl',
        'batch_vendor_cost_brl',
        'batch_margin_brl',
      ],
      rows.map((x) => [
        x.day,
        x.tenant_id,
        x.tenant_name,
        x.model,
        x.requests,
        x.input_tokens,
        x.cached_tokens,
        x.cache_write_tokens,
        x.output_tokens,
        x.reasoning_tokens,
        formatBrl(x.revenue_micros),
        formatBrl(x.vendor_cost_micros),
        formatBrl(x.revenue_micros - x.vendor_cost_micros),
        x.uncosted,
        x.batch_requests,
        formatBrl(x.batch_revenue_micros),
        formatBrl(x.batch_vendor_cost_micros),
        formatBrl(x.batch_revenue_micros - x.batch_vendor_cost_micros),
      ]),
    );
    return send(c, 200, 'text/csv; charset=utf-8', body, { 'content-disposition': `attachment; filename="catraca-margin-${f.from}-${f.to}.csv"` });
  });

  app.get('/shortfalls', async (c) => {
    const rows = await shortfalls(db);
    return r.page(c, 200, c.var.t('shortfalls.title'), (vc) => shortfallsPage(vc, rows));
  });
  return app;
}
