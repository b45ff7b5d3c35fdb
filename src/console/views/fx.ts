import { dateTime } from '../../web/format.ts';
import { csrfField, html, type SafeHtml } from '../../web/html.ts';
import type { FxRate, FxStatus } from '../../fx/service.ts';
import { table, type ViewCtx } from './layout.ts';

// "Taxa do dólar": the rate USD-priced models are sold at (src/fx/), the PTAX job's state, the
// rates in force over time, and the operator's form that pins a rate or goes back to the PTAX.

/** R$ per US$ with the decimals the rate has (at least 4): 5,4321; 5,432115. */
export function rateText(lang: string, micros: bigint): string {
  const frac = (micros % 1_000_000n).toString().padStart(6, '0');
  return `${micros / 1_000_000n}${lang === 'en' ? '.' : ','}${frac.slice(0, 4)}${frac.slice(4).replace(/0+$/, '')}`;
}

export interface FxPageData {
  rate: FxRate | null;
  status: FxStatus;
  history: Array<{ usd_brl_micros: bigint; rate_date: string; source: 'ptax' | 'pinned'; valid_from: Date; set_by: string | null }>;
  usdModels: number;
  form?: { rate?: string; reason?: string };
}

export function fxPage(c: ViewCtx, d: FxPageData): SafeHtml {
  const s = d.status;
  const brDate = (x: string) => `${x.slice(8, 10)}/${x.slice(5, 7)}/${x.slice(0, 4)}`;
  return html`<h1>${c.t('fx.title')}</h1>
<section class="card">
<p class="muted">${c.t('fx.intro', { n: String(d.usdModels) })}</p>
<dl class="facts">
<dt>${c.t('fx.in_force')}</dt><dd data-testid="fx-rate">${d.rate ? `R$ ${rateText(c.lang, d.rate.micros)}` : c.t('fx.none')}</dd>
${d.rate ? html`<dt>${c.t('fx.source')}</dt><dd data-testid="fx-source">${c.t(d.rate.source === 'pinned' ? 'fx.source.pinned' : 'fx.source.ptax', { date: brDate(d.rate.date) })}</dd>` : ''}
<dt>${c.t('fx.last_ok')}</dt><dd>${s.lastOkAt ? dateTime(c.lang, s.lastOkAt) : c.t('common.never')}</dd>
${s.failingSince ? html`<dt>${c.t('fx.failing_since')}</dt><dd data-testid="fx-failing">${dateTime(c.lang, s.failingSince)}${s.lastError ? html` — <code>${s.lastError}</code>` : ''}</dd>` : ''}
</dl>
</section>
<section class="card narrow">
<h2>${c.t('fx.pin')}</h2>
<form method="post" action="/fx/pin" data-testid="fx-pin-form">
${csrfField(c)}
<label>${c.t('fx.rate')}<input type="text" name="rate" inputmode="decimal" required placeholder="5,4321" value="${d.form?.rate ?? ''}"></label>
<label>${c.t('common.reason')}<input type="text" name="reason" required maxlength="500" value="${d.form?.reason ?? ''}"></label>
<small>${c.t('common.reason_hint')}</small>
<button type="submit">${c.t('fx.pin_button')}</button>
</form>
${
  s.pinnedMicros !== null
    ? html`<form method="post" action="/fx/unpin" data-testid="fx-unpin-form">
${csrfField(c)}
<label>${c.t('common.reason')}<input type="text" name="reason" required maxlength="500"></label>
<button type="submit">${c.t('fx.unpin_button')}</button>
</form>`
    : ''
}
</section>
<section class="card"><h2>${c.t('fx.history')}</h2>${table(
    c,
    'fx-history',
    [c.t('fx.valid_from'), { text: c.t('fx.rate_col'), num: true }, c.t('fx.source_col'), c.t('fx.by')],
    d.history.map(
      (h) =>
        html`<tr data-testid="fx-row"><td>${dateTime(c.lang, h.valid_from)}</td><td class="num">${rateText(c.lang, h.usd_brl_micros)}</td><td>${c.t(h.source === 'pinned' ? 'fx.source.pinned' : 'fx.source.ptax', { date: brDate(h.rate_date) })}</td><td>${h.set_by ?? ''}</td></tr>`,
    ),
  )}</section>`;
}
