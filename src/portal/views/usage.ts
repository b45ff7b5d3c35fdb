import { amount, dateTime, int, money, price } from '../../web/format.ts';
import type { ModelRecord } from '../../db/models.ts';
import { pager } from '../../web/layout.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import type { Lang } from '../i18n/index.ts';
import { MAX_PERIOD_DAYS, PERIOD_PRESETS, type Period } from '../period.ts';
import type { DaySpend, EndUsersSpend, KeySpend, LedgerRow, ModelSpend } from '../usage.ts';
import { allows, type ViewCtx } from './layout.ts';

// The usage dashboard: period selector, spend per São Paulo day as a server-rendered SVG bar chart
// whose values are written on it (a value axis, and amounts over the bars) beside a table of the same
// numbers, the breakdowns by model, key and end user, and the CSV exports of the period.

export interface DashboardData {
  balance: bigint;
  held: bigint;
  gatewayUrl: string;
  period: Period;
  /** The preset the period came from (7, 30, 90 days), null for a from/to period. */
  preset: number | null;
  days: DaySpend[];
  byModel: ModelSpend[];
  byKey: KeySpend[];
  byEndUser: EndUsersSpend;
}

const dateOf = (day: string) => new Date(`${day}T12:00:00Z`);

/** A São Paulo day on the chart's axis: 31/01 (pt-BR), Jan 31 (English). */
export function shortDay(lang: Lang, day: string): string {
  const o: Intl.DateTimeFormatOptions = lang === 'en' ? { month: 'short', day: 'numeric' } : { day: '2-digit', month: '2-digit' };
  return new Intl.DateTimeFormat(lang, { ...o, timeZone: 'UTC' }).format(dateOf(day));
}

/** A São Paulo day in tables and headings: 31/01/2025 (pt-BR), Jan 31, 2025 (English). */
export function longDay(lang: Lang, day: string): string {
  const o: Intl.DateTimeFormatOptions =
    lang === 'en' ? { month: 'short', day: 'numeric', year: 'numeric' } : { day: '2-digit', month: '2-digit', year: 'numeric' };
  return new Intl.DateTimeFormat(lang, { ...o, timeZone: 'UTC' }).format(dateOf(day));
}

/** The smallest 1, 2 or 5 × 10^k micro-reais that, times `steps`, reaches `max` (a readable axis). */
export function axisStep(max: bigint, steps: number): bigint {
  const n = BigInt(steps);
  for (let unit = 1n; ; unit *= 10n) for (const m of [1n, 2n, 5n]) if (m * unit * n >= max) return m * unit;
}

/** An amount without the currency sign, for the labels over the bars. */
const bare = (lang: Lang, micros: bigint) => amount(lang, micros).replace(/^R\$\s/, '');

// the viewBox is about the chart's width on a laptop screen, so that its 12px text stays 12px
const W = 640;
const H = 300;
const LEFT = 76;
const RIGHT = 8;
const TOP = 70;
const BOTTOM = 30;
const TICKS = 4;

export function spendChart(c: ViewCtx, days: DaySpend[], period: Period): SafeHtml {
  const max = days.reduce((m, d) => (d.micros > m ? d.micros : m), 0n);
  const step = axisStep(max === 0n ? 1_000_000n : max, TICKS);
  const top = step * BigInt(TICKS);
  const plotH = H - TOP - BOTTOM;
  const bw = (W - LEFT - RIGHT) / Math.max(days.length, 1);
  const y = (micros: bigint) => H - BOTTOM - (Number((micros * 100_000n) / top) / 100_000) * plotH;
  // every bar is labelled up to a month; over longer periods the busiest day is (the table has them all)
  const labelAll = days.length <= 31;
  const dateEvery = Math.ceil(days.length / 15);
  const ticks = Array.from({ length: TICKS + 1 }, (_, i) => step * BigInt(i));
  return html`<svg class="chart" data-testid="spend-chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${c.t('dash.chart_label', { from: longDay(c.lang, period.from), to: longDay(c.lang, period.to) })}">
${ticks.map((v) => html`<line x1="${LEFT}" x2="${W - RIGHT}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" class="${v === 0n ? 'axis' : 'grid'}"/><text x="${LEFT - 6}" y="${(y(v) + 4).toFixed(1)}" class="lbl tick" text-anchor="end">${amount(c.lang, v)}</text>`)}
${days.map((d, i) => {
  const x = LEFT + i * bw;
  const cx = x + bw / 2;
  const top = y(d.micros);
  const showValue = d.micros > 0n && (labelAll || d.micros === max);
  return html`<rect x="${(x + 1).toFixed(1)}" y="${top.toFixed(1)}" width="${Math.max(bw - 2, 1).toFixed(1)}" height="${(H - BOTTOM - top).toFixed(1)}" data-day="${d.day}" data-micros="${d.micros.toString()}"><title>${longDay(c.lang, d.day)}: ${amount(c.lang, d.micros)} · ${int(c.lang, d.requests)} ${c.t('dash.requests').toLowerCase()}</title></rect>${
    showValue
      ? html`<text class="lbl value" data-day="${d.day}" dominant-baseline="middle" transform="translate(${cx.toFixed(1)} ${(top - 4).toFixed(1)}) rotate(-90)">${bare(c.lang, d.micros)}</text>`
      : ''
  }${i % dateEvery === 0 ? html`<text class="lbl date" x="${cx.toFixed(1)}" y="${H - BOTTOM + 18}" text-anchor="middle">${shortDay(c.lang, d.day)}</text>` : ''}`;
})}
</svg>`;
}

function periodSelector(c: ViewCtx, d: DashboardData): SafeHtml {
  return html`<form method="get" action="/dashboard" class="period" data-testid="period-form">
<span class="muted">${c.t('period.label')}:</span>
${PERIOD_PRESETS.map(
  (n) =>
    html`<a href="/dashboard?days=${n}" class="preset${d.preset === n ? ' current' : ''}" ${d.preset === n ? html`aria-current="true"` : ''}>${c.t('period.days', { n })}</a>`,
)}
<label>${c.t('period.from')} <input type="date" name="from" value="${d.period.from}" required data-testid="period-from"></label>
<label>${c.t('period.to')} <input type="date" name="to" value="${d.period.to}" required data-testid="period-to"></label>
<button type="submit" class="small">${c.t('period.apply')}</button>
</form>`;
}

function dayTable(c: ViewCtx, days: DaySpend[]): SafeHtml {
  const total = days.reduce((s, d) => s + d.micros, 0n);
  const requests = days.reduce((s, d) => s + d.requests, 0);
  return html`<div class="daytable"><table data-testid="day-table"><thead><tr><th>${c.t('dash.day')}</th><th class="num">${c.t('dash.requests')}</th><th class="num">${c.t('dash.spend')}</th></tr></thead><tbody>
${[...days].reverse().map((d) => html`<tr data-day="${d.day}"><td>${longDay(c.lang, d.day)}</td><td class="num">${int(c.lang, d.requests)}</td><td class="num">${amount(c.lang, d.micros)}</td></tr>`)}
</tbody><tfoot><tr data-testid="day-total"><th>${c.t('dash.total')}</th><th class="num">${int(c.lang, requests)}</th><th class="num">${amount(c.lang, total)}</th></tr></tfoot></table></div>`;
}

const none = (c: ViewCtx) => html`<p class="muted">${c.t('common.none')}</p>`;

function modelTable(c: ViewCtx, rows: ModelSpend[]): SafeHtml {
  if (rows.length === 0) return none(c);
  return html`<table data-testid="by-model"><thead><tr><th>${c.t('dash.model')}</th><th class="num">${c.t('dash.requests')}</th><th class="num">${c.t('dash.tokens_in')}</th><th class="num">${c.t('dash.tokens_out')}</th><th class="num">${c.t('dash.batch_spend')}</th><th class="num">${c.t('dash.spend')}</th></tr></thead><tbody>
${rows.map((m) => html`<tr><td><code>${m.model}</code></td><td class="num">${int(c.lang, m.requests)}</td><td class="num">${int(c.lang, m.input_tokens)}</td><td class="num">${int(c.lang, m.output_tokens)}</td><td class="num">${amount(c.lang, m.batch_micros)}</td><td class="num">${amount(c.lang, m.micros)}</td></tr>`)}
</tbody></table>`;
}

function keyTable(c: ViewCtx, rows: KeySpend[]): SafeHtml {
  if (rows.length === 0) return none(c);
  return html`<table data-testid="by-key"><thead><tr><th>${c.t('dash.key')}</th><th class="num">${c.t('dash.requests')}</th><th class="num">${c.t('dash.spend')}</th></tr></thead><tbody>
${rows.map((k) => html`<tr><td>${k.label || k.key_hint || k.key_id || c.t('dash.no_key')}</td><td class="num">${int(c.lang, k.requests)}</td><td class="num">${amount(c.lang, k.micros)}</td></tr>`)}
</tbody></table>`;
}

function endUserTable(c: ViewCtx, { rows, groups }: EndUsersSpend, days: DaySpend[]): SafeHtml {
  if (rows.length === 0) return none(c);
  // what the listed end users leave out of the period's spend: the others, summed in one row
  const restMicros = days.reduce((s, d) => s + d.micros, 0n) - rows.reduce((s, u) => s + u.micros, 0n);
  const restRequests = days.reduce((s, d) => s + d.requests, 0) - rows.reduce((s, u) => s + u.requests, 0);
  return html`<table data-testid="by-end-user"><thead><tr><th>${c.t('dash.end_user')}</th><th class="num">${c.t('dash.requests')}</th><th class="num">${c.t('dash.spend')}</th></tr></thead><tbody>
${rows.map((u) => html`<tr><td>${u.end_user === null ? html`<em>${c.t('dash.no_end_user')}</em>` : u.end_user}</td><td class="num">${int(c.lang, u.requests)}</td><td class="num">${amount(c.lang, u.micros)}</td></tr>`)}
${restRequests > 0 ? html`<tr data-testid="other-end-users"><td><em>${c.t('dash.other_end_users', { n: int(c.lang, groups - rows.length) })}</em></td><td class="num">${int(c.lang, restRequests)}</td><td class="num">${amount(c.lang, restMicros)}</td></tr>` : ''}
</tbody></table>
<p class="muted hint">${c.t('dash.end_user_hint')}</p>`;
}

function exportLinks(c: ViewCtx, p: Period): SafeHtml {
  const q = `from=${p.from}&to=${p.to}`;
  return html`<section class="card" id="exports" data-testid="exports"><h2>${c.t('exports.title')}</h2>
<p class="actions"><a class="button" href="/exports/statement.csv?${q}" download data-testid="export-statement">${c.t('exports.statement')}</a>
<a class="button" href="/exports/usage.csv?${q}" download data-testid="export-usage">${c.t('exports.usage')}</a></p>
<p class="muted hint">${c.t('exports.note', { max: MAX_PERIOD_DAYS })}</p>
</section>`;
}

export function dashboardPage(c: ViewCtx, d: DashboardData): SafeHtml {
  return html`<h1>${c.t('dash.title')}</h1>
<section class="card stat">
<div><span class="muted">${c.t('common.balance')}</span><div class="big" data-testid="balance">${money(c.lang, d.balance)}</div>
<span class="muted">${money(c.lang, d.balance - d.held)} ${c.t('dash.balance_available')}</span></div>
<div><span class="muted">${c.t('dash.base_url')}</span><div><code data-testid="gateway-url">${d.gatewayUrl}</code></div>
${allows(c, 'topup') ? html`<a class="button" href="/topup">${c.t('nav.topup')}</a>` : ''}</div>
</section>
${periodSelector(c, d)}
<p class="muted" data-testid="period-range">${c.t('period.range', { from: longDay(c.lang, d.period.from), to: longDay(c.lang, d.period.to) })}</p>
<section class="card"><h2>${c.t('dash.spend_per_day')}</h2>
<div class="chart-grid">${spendChart(c, d.days, d.period)}${dayTable(c, d.days)}</div>
</section>
<section class="card"><h2>${c.t('dash.by_model')}</h2>${modelTable(c, d.byModel)}</section>
<div class="grid2">
<section class="card"><h2>${c.t('dash.by_key')}</h2>${keyTable(c, d.byKey)}</section>
<section class="card"><h2>${c.t('dash.by_end_user')}</h2>${endUserTable(c, d.byEndUser, d.days)}</section>
</div>
${allows(c, 'exports') ? exportLinks(c, d.period) : ''}`;
}

function ledgerWhat(c: ViewCtx, r: LedgerRow): SafeHtml {
  if (r.source === 'request')
    return html`${c.t('ledger.request', { model: r.model ?? '?', tin: int(c.lang, r.input_tokens ?? 0), tout: int(c.lang, r.output_tokens ?? 0) })}${r.key_label ? html` · <em>${r.key_label}</em>` : ''}`;
  if (r.source === 'pix') return html`${c.t('ledger.pix')}`;
  if (r.source === 'pix_refund') return html`${c.t('ledger.pix_refund')}`;
  if (r.source === 'grant') return html`${c.t('ledger.grant')}${r.note ? html` · ${r.note}` : ''}`;
  if (r.source === 'adjustment') return html`${c.t('ledger.adjustment')}${r.note ? html` · ${r.note}` : ''}`;
  return html`${r.source}`;
}

export function ledgerPage(c: ViewCtx, rows: LedgerRow[], page: number, hasMore: boolean): SafeHtml {
  return html`<h1>${c.t('ledger.title')}</h1>
<p class="actions"><a class="button" href="/exports/statement.csv" download data-testid="ledger-export">${c.t('exports.statement_30d')}</a> <a href="/dashboard#exports">${c.t('exports.other_periods')}</a></p>
<section class="card">
<table data-testid="ledger"><thead><tr><th>${c.t('ledger.when')}</th><th>${c.t('ledger.what')}</th><th class="num">${c.t('ledger.amount')}</th><th class="num">${c.t('ledger.balance_after')}</th></tr></thead><tbody>
${rows.length === 0 ? html`<tr><td colspan="4" class="muted">${c.t('common.none')}</td></tr>` : ''}
${rows.map(
  (r) => html`<tr data-testid="ledger-row" data-source="${r.source}"><td>${dateTime(c.lang, r.created_at)}</td><td>${ledgerWhat(c, r)}</td>
<td class="num ${r.kind}">${r.kind === 'credit' ? '+' : '−'}${amount(c.lang, r.amount_micros)}</td><td class="num">${amount(c.lang, r.balance_after_micros)}</td></tr>`,
)}
</tbody></table>
${pager(c, new URLSearchParams(), '/ledger', page, hasMore, { testids: true })}
</section>`;
}

/** A USD-priced model's BRL price: the rate it was computed at, that rate's date, the day the price was set (YYYY-MM-DD). */
export interface UsdPricing {
  rate: bigint;
  date: string;
  pricedOn: string;
}

export function modelsPage(c: ViewCtx, models: ModelRecord[], usd: Map<string, UsdPricing> = new Map()): SafeHtml {
  const day = (d: string) => `${d.slice(8, 10)}/${d.slice(5, 7)}/${d.slice(0, 4)}`;
  const fx = (id: string) => {
    const u = usd.get(id);
    if (!u) return '';
    const frac = (u.rate % 1_000_000n).toString().padStart(6, '0');
    const rate = `${u.rate / 1_000_000n}${c.lang === 'en' ? '.' : ','}${frac.slice(0, 4)}${frac.slice(4).replace(/0+$/, '')}`;
    return html`<br><small data-testid="model-fx">${c.t('models.usd_rate', { rate, date: day(u.date), priced: day(u.pricedOn) })}</small>`;
  };
  return html`<h1>${c.t('models.title')}</h1>
<section class="card">
<table data-testid="models"><thead><tr><th>${c.t('models.id')}</th><th class="num">${c.t('models.input')}</th><th class="num">${c.t('models.output')}</th><th class="num">${c.t('models.context')}</th></tr></thead><tbody>
${models.length === 0 ? html`<tr><td colspan="4" class="muted">${c.t('common.none')}</td></tr>` : ''}
${models.map((m) => html`<tr><td><code>${m.id}</code>${m.name ? html`<br><small>${m.name}</small>` : ''}${fx(m.id)}</td><td class="num">${price(c.lang, m.input_price)}</td><td class="num">${price(c.lang, m.output_price)}</td><td class="num">${int(c.lang, m.context_length)}</td></tr>`)}
</tbody></table>
</section>`;
}
