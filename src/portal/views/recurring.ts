import type { RecurrenceRow, RecurringChargeRow } from '../../pix/recurring/service.ts';
import { csrfField, html, raw, type SafeHtml } from '../../web/html.ts';
import { dateTime, money } from '../../web/format.ts';
import type { ViewCtx } from './layout.ts';

// "Recarga automática": a recurring top-up by Pix Automático (src/pix/recurring/): the form that
// creates one, the authorization QR while it waits, its state, its charges, cancelling it.

export interface RecurringForm {
  periodicity?: string;
  target?: string;
  max?: string;
  document?: string;
  name?: string;
  first?: string;
  ispb?: string;
  agency?: string;
  account?: string;
}

const LIVE = new Set(['CRIADA', 'APROVADA']);

const brDate = (d: string) => `${d.slice(8, 10)}/${d.slice(5, 7)}/${d.slice(0, 4)}`;

export function recurringPage(
  c: ViewCtx,
  v: { enabled: boolean; rec: RecurrenceRow | null; charges: RecurringChargeRow[]; qr: string | null; form?: RecurringForm },
): SafeHtml {
  const rec = v.rec;
  const live = !!rec && LIVE.has(rec.status);
  return html`<h1>${c.t('auto.title')}</h1>
<p class="muted">${c.t('auto.intro')}</p>
${!v.enabled ? html`<section class="card narrow"><p data-testid="auto-off">${c.t('auto.off')}</p></section>` : ''}
${rec ? stateCard(c, rec, v.qr) : ''}
${v.enabled && !live ? formCard(c, v.form ?? {}) : ''}
${rec && v.charges.length ? chargesCard(c, v.charges) : ''}
<p><a href="/topup">${c.t('topup.back')}</a></p>`;
}

function stateCard(c: ViewCtx, rec: RecurrenceRow, qr: string | null): SafeHtml {
  const state = c.t(`auto.state.${rec.status}` as never);
  const period = rec.periodicity === 'SEMANAL' ? c.t('auto.weekly') : c.t('auto.monthly');
  return html`<section class="card" data-testid="auto-state" data-status="${rec.status}">
<p>${c.t('auto.state')}: <span class="badge s-${rec.status === 'APROVADA' ? 'CONCLUIDA' : rec.status === 'CRIADA' ? 'ATIVA' : 'EXPIRADA'}" data-testid="auto-status">${state}</span></p>
<dl class="facts">
<dt>${c.t('auto.periodicity')}</dt><dd>${period}</dd>
<dt>${c.t('auto.target')}</dt><dd>${money(c.lang, rec.target_micros)}</dd>
<dt>${c.t('auto.max')}</dt><dd>${money(c.lang, rec.max_micros)}</dd>
<dt>${c.t('auto.payer_name')}</dt><dd>${rec.payer_name}</dd>
</dl>
${rec.status === 'APROVADA' && rec.next_due_date ? html`<p data-testid="auto-next">${c.t('auto.next', { date: brDate(rec.next_due_date) })}</p>` : ''}
${
  rec.status === 'CANCELADA' && rec.ended_by
    ? html`<p data-testid="auto-ended">${c.t('auto.cancelled_by', { who: c.t(`auto.who.${rec.ended_by}` as never), code: rec.ended_code ?? '' })}${rec.ended_at ? html` — ${dateTime(c.lang, rec.ended_at)}` : ''}</p>`
    : ''
}
${
  rec.status === 'CRIADA' && rec.br_code && qr
    ? html`<div class="pay">
<img class="qr" data-testid="auto-qr" alt="QR code Pix Automático" src="${qr}" width="280" height="280">
<div>
<p>${c.t('auto.scan')}</p>
<label>${c.t('auto.copy_paste')}<textarea readonly rows="5" id="auto-brcode" data-testid="auto-brcode">${rec.br_code}</textarea></label>
<button type="button" data-copy="#auto-brcode" data-copied="${c.t('common.copied')}">${c.t('common.copy')}</button>
</div>
</div>`
    : ''
}
${rec.status === 'CRIADA' && rec.journey === 'JORNADA_1' ? html`<p data-testid="auto-push-sent">${c.t('auto.push_sent')}</p>` : ''}
${
  LIVE.has(rec.status)
    ? html`<form method="post" action="/topup/auto/cancel">${csrfField(c)}<button type="submit" class="danger" data-testid="auto-cancel">${c.t('auto.cancel')}</button></form>`
    : ''
}
</section>`;
}

function formCard(c: ViewCtx, f: RecurringForm): SafeHtml {
  const sel = (v: string) => ((f.periodicity ?? 'SEMANAL') === v ? raw(' selected') : '');
  return html`<section class="card narrow">
<form method="post" action="/topup/auto" data-testid="auto-form">
${csrfField(c)}
<label>${c.t('auto.periodicity')}<select name="periodicity"><option value="SEMANAL"${sel('SEMANAL')}>${c.t('auto.weekly')}</option><option value="MENSAL"${sel('MENSAL')}>${c.t('auto.monthly')}</option></select></label>
<label>${c.t('auto.target')}<input type="text" name="target" inputmode="decimal" required placeholder="100,00" value="${f.target ?? ''}"></label>
<label>${c.t('auto.max')}<input type="text" name="max" inputmode="decimal" required placeholder="200,00" value="${f.max ?? ''}"></label>
<label>${c.t('auto.payer_document')}<input type="text" name="document" required autocomplete="off" value="${f.document ?? ''}"></label>
<label>${c.t('auto.payer_name')}<input type="text" name="name" required maxlength="140" value="${f.name ?? ''}"></label>
<label>${c.t('auto.first')}<input type="text" name="first" inputmode="decimal" placeholder="50,00" value="${f.first ?? ''}"></label>
<small>${c.t('auto.first_help')}</small>
<fieldset><legend>${c.t('auto.push')}</legend>
<small>${c.t('auto.push_help')}</small>
<label>${c.t('auto.push_ispb')}<input type="text" name="ispb" maxlength="8" autocomplete="off" value="${f.ispb ?? ''}"></label>
<label>${c.t('auto.push_agency')}<input type="text" name="agency" inputmode="numeric" maxlength="4" autocomplete="off" value="${f.agency ?? ''}"></label>
<label>${c.t('auto.push_account')}<input type="text" name="account" inputmode="numeric" maxlength="24" autocomplete="off" value="${f.account ?? ''}"></label>
</fieldset>
<button type="submit" data-testid="auto-activate">${c.t('auto.activate')}</button>
</form>
</section>`;
}

function chargesCard(c: ViewCtx, charges: RecurringChargeRow[]): SafeHtml {
  return html`<section class="card"><h2>${c.t('auto.charges')}</h2>
<table data-testid="auto-charges"><thead><tr><th>${c.t('auto.due')}</th><th class="num">${c.t('ledger.amount')}</th><th>${c.t('keys.status')}</th><th class="num">${c.t('auto.failures')}</th></tr></thead><tbody>
${charges.map(
  (ch) =>
    html`<tr><td>${brDate(ch.due_date)}</td><td class="num">${money(c.lang, ch.amount_micros)}</td><td>${c.t(`auto.charge.${ch.status}` as never)}</td><td class="num">${ch.failures}</td></tr>`,
)}
</tbody></table></section>`;
}
