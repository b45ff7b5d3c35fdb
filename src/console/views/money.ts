import { amount, dateTime, int } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import type { DayTotal, MarginRow, MarginTotals, ShortfallRow } from '../money.ts';
import { table, type ViewCtx } from './layout.ts';

/** Margin as a percentage of revenue, one decimal ("—" without revenue). */
export function marginPercent(c: ViewCtx, revenue: bigint, cost: bigint): string {
  if (revenue === 0n) return '—';
  const tenths = Number(((revenue - cost) * 1000n) / revenue);
  return `${new Intl.NumberFormat(c.lang, { minimumFractionDigits: 1, maximumFractionDigits: 1 }).format(tenths / 10)} %`;
}

/** Revenue and vendor cost per day (two bars each), server-rendered SVG. */
function marginChart(c: ViewCtx, days: DayTotal[]): SafeHtml {
  const W = 960;
  const H = 220;
  const pad = 28;
  const larger = (a: bigint, b: bigint) => (a > b ? a : b);
  const max = days.reduce((m, d) => larger(larger(m, d.revenue_micros), d.vendor_cost_micros), 0n);
  const slot = (W - pad * 2) / Math.max(days.length, 1);
  const bw = Math.max(slot / 2 - 1, 1);
  const height = (v: bigint) => (max === 0n ? 0 : (Number((v * 10000n) / max) / 10000) * (H - pad * 2));
  const bar = (d: DayTotal, i: number, which: 'revenue' | 'cost') => {
    const v = which === 'revenue' ? d.revenue_micros : d.vendor_cost_micros;
    const h = height(v);
    const x = pad + i * slot + (which === 'revenue' ? 0 : bw + 1);
    return html`<rect class="${which}" x="${x.toFixed(1)}" y="${(H - pad - h).toFixed(1)}" width="${bw.toFixed(1)}" height="${h.toFixed(1)}" data-day="${d.day}" data-micros="${v.toString()}"><title>${d.day} · ${c.t(which === 'revenue' ? 'money.revenue' : 'money.vendor_cost')}: ${amount(c.lang, v)}</title></rect>`;
  };
  return html`<svg class="chart margin" data-testid="margin-chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${c.t('money.chart')}">
<line x1="${pad}" y1="${H - pad}" x2="${W - pad}" y2="${H - pad}" class="axis"/>
${days.map((d, i) => [bar(d, i, 'revenue'), bar(d, i, 'cost')])}
<text x="${pad}" y="14" class="lbl">${amount(c.lang, max)}</text>
<text x="${pad}" y="${H - 8}" class="lbl">${days[0]?.day ?? ''}</text>
<text x="${W - pad}" y="${H - 8}" class="lbl" text-anchor="end">${days[days.length - 1]?.day ?? ''}</text>
</svg>
<p class="legend"><span class="sw revenue"></span>${c.t('money.revenue')} <span class="sw cost"></span>${c.t('money.vendor_cost')}</p>`;
}

export interface MoneyPageData {
  from: string;
  to: string;
  tenantId: string;
  model: string;
  rows: MarginRow[];
  days: DayTotal[];
  totals: MarginTotals;
  csvHref: string;
}

export function moneyPage(c: ViewCtx, d: MoneyPageData): SafeHtml {
  const t = d.totals;
  return html`<h1>${c.t('money.title')}</h1>
<section class="card">
<form method="get" action="/money" class="search">
<label>${c.t('money.from')}<input type="date" name="from" value="${d.from}" required></label>
<label>${c.t('money.to')}<input type="date" name="to" value="${d.to}" required></label>
<label>${c.t('money.tenant')}<input type="text" name="tenant" value="${d.tenantId}" maxlength="100"></label>
<label>${c.t('money.model')}<input type="text" name="model" value="${d.model}" maxlength="200"></label>
<button type="submit">${c.t('money.show')}</button>
<a class="button" href="${d.csvHref}" data-testid="money-csv">${c.t('common.csv')}</a>
</form>
<p class="muted"><small>${c.t('money.note')}</small></p>
</section>
<section class="card stat" data-testid="money-totals">
<div><span class="muted">${c.t('money.revenue')}</span><div class="big" data-testid="total-revenue">${amount(c.lang, t.revenue_micros)}</div></div>
<div><span class="muted">${c.t('money.vendor_cost')}</span><div class="big" data-testid="total-cost">${amount(c.lang, t.vendor_cost_micros)}</div></div>
<div><span class="muted">${c.t('money.margin')}</span><div class="big" data-testid="total-margin">${amount(c.lang, t.revenue_micros - t.vendor_cost_micros)}</div>
<span class="muted">${marginPercent(c, t.revenue_micros, t.vendor_cost_micros)} · ${c.t('money.requests', { n: int(c.lang, t.requests) })}</span></div>
</section>
<section class="card stat" data-testid="money-batch-totals">
<div><span class="muted">${c.t('money.batch_revenue')}</span><div class="big" data-testid="batch-revenue">${amount(c.lang, t.batch_revenue_micros)}</div></div>
<div><span class="muted">${c.t('money.batch_vendor_cost')}</span><div class="big" data-testid="batch-cost">${amount(c.lang, t.batch_vendor_cost_micros)}</div></div>
<div><span class="muted">${c.t('money.batch_margin')}</span><div class="big" data-testid="batch-margin">${amount(c.lang, t.batch_revenue_micros - t.batch_vendor_cost_micros)}</div>
<span class="muted">${marginPercent(c, t.batch_revenue_micros, t.batch_vendor_cost_micros)} · ${c.t('money.batch_lines', { n: int(c.lang, t.batch_requests) })}</span></div>
</section>
<p class="muted"><small>${c.t('money.batch_note')}</small></p>
${t.uncosted ? html`<p class="error" data-testid="uncosted">${c.t('money.uncosted', { n: int(c.lang, t.uncosted) })}</p>` : ''}
<section class="card"><h2>${c.t('money.chart')}</h2>${marginChart(c, d.days)}</section>
<section class="card"><h2>${c.t('money.table')}</h2>${table(
    c,
    'margin',
    [
      c.t('money.day'),
      c.t('money.model'),
      c.t('money.tenant'),
      { text: c.t('money.requests_col'), num: true },
      { text: c.t('money.tokens_in'), num: true },
      { text: c.t('money.tokens_cached'), num: true },
      { text: c.t('money.tokens_out'), num: true },
      { text: c.t('money.revenue'), num: true },
      { text: c.t('money.vendor_cost'), num: true },
      { text: c.t('money.margin'), num: true },
      { text: '%', num: true },
      { text: c.t('money.batch_revenue'), num: true },
      { text: c.t('money.batch_vendor_cost'), num: true },
      { text: c.t('money.batch_margin'), num: true },
    ],
    d.rows.map(
      (r) => html`<tr data-testid="margin-row" data-day="${r.day}" data-model="${r.model}" data-tenant="${r.tenant_id}">
<td>${r.day}</td><td><code>${r.model}</code></td><td><a href="/tenants/${r.tenant_id}">${r.tenant_name}</a></td><td class="num">${int(c.lang, r.requests)}</td>
<td class="num">${int(c.lang, r.input_tokens)}</td><td class="num">${int(c.lang, r.cached_tokens)}</td><td class="num">${int(c.lang, r.output_tokens)}</td>
<td class="num" data-testid="row-revenue">${amount(c.lang, r.revenue_micros)}</td>
<td class="num" data-testid="row-cost">${r.uncosted === r.requests ? '—' : amount(c.lang, r.vendor_cost_micros)}</td>
<td class="num" data-testid="row-margin">${r.uncosted === r.requests ? '—' : amount(c.lang, r.revenue_micros - r.vendor_cost_micros)}</td>
<td class="num">${r.uncosted === r.requests ? '—' : marginPercent(c, r.revenue_micros, r.vendor_cost_micros)}</td>
${
  r.batch_requests === 0
    ? html`<td class="num" data-testid="row-batch-revenue">—</td><td class="num" data-testid="row-batch-cost">—</td><td class="num" data-testid="row-batch-margin">—</td>`
    : html`<td class="num" data-testid="row-batch-revenue">${amount(c.lang, r.batch_revenue_micros)}</td>
<td class="num" data-testid="row-batch-cost">${r.uncosted === r.requests ? '—' : amount(c.lang, r.batch_vendor_cost_micros)}</td>
<td class="num" data-testid="row-batch-margin">${r.uncosted === r.requests ? '—' : amount(c.lang, r.batch_revenue_micros - r.batch_vendor_cost_micros)}</td>`
}</tr>`,
    ),
  )}</section>`;
}

export function shortfallsPage(c: ViewCtx, rows: ShortfallRow[]): SafeHtml {
  return html`<h1>${c.t('shortfalls.title')}</h1>
<section class="card"><p class="muted">${c.t('shortfalls.text')}</p>${table(
    c,
    'shortfalls',
    [
      c.t('shortfalls.when'),
      c.t('shortfalls.tenant'),
      c.t('shortfalls.request'),
      c.t('money.model'),
      { text: c.t('shortfalls.cost'), num: true },
      { text: c.t('shortfalls.debited'), num: true },
      { text: c.t('shortfalls.missing'), num: true },
      { text: c.t('shortfalls.recovered'), num: true },
      '',
    ],
    rows.map(
      (r) => html`<tr data-testid="shortfall-row" data-request="${r.request_id}"><td>${dateTime(c.lang, r.created_at)}</td>
<td><a href="/tenants/${r.tenant_id}">${r.tenant_name}</a>${r.suspended_at ? html` <span class="badge s-EXPIRADA">${c.t('tenants.suspended')}</span>` : ''}</td>
<td><code>${r.request_id}</code></td><td><code>${r.model ?? ''}</code></td><td class="num">${amount(c.lang, r.cost_micros)}</td>
<td class="num">${amount(c.lang, r.debited_micros)}</td><td class="num">${amount(c.lang, r.cost_micros - r.debited_micros)}</td>
<td class="num">${amount(c.lang, r.recovered_micros)}</td>
<td><a href="/tenants/${r.tenant_id}?request=${encodeURIComponent(r.request_id)}">${c.t('shortfalls.adjust')}</a></td></tr>`,
    ),
  )}</section>`;
}
