import type { InvoiceSummary, ReconcileRow } from '../../nfse/store.ts';
import { amount, dateTime } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import type { ConsoleKey } from '../i18n/index.ts';
import { csrfField, table, type ViewCtx } from './layout.ts';

// Notas fiscais: the notes that need the operator (rejected with Sefin's code and message, still
// pending after failed attempts, a cancellation refused or impossible) with a retry button where a
// retry can help, and the credited top-ups without an issued note with the reason (the same
// reconciliation as `catraca nfse list --missing`, src/nfse/store.ts).

/** What a cancellation state tells the operator: a refund Sefin can no longer (or never) undo. */
const CANNOT_CANCEL = new Set(['outside_window', 'partial_refund']);

function stateText(c: ViewCtx, i: InvoiceSummary): string {
  const parts = [c.t(`nfse.state.${i.state}` as ConsoleKey)];
  if (i.cancel_state) parts.push(c.t(`nfse.cancel.${i.cancel_state}` as ConsoleKey));
  return parts.join(' · ');
}

function detail(c: ViewCtx, i: InvoiceSummary): SafeHtml {
  if (i.cancel_state && CANNOT_CANCEL.has(i.cancel_state)) return html`<p data-testid="nfse-do-instead">${c.t('nfse.do_instead')} ${i.cancel_note ?? ''}</p>`;
  if (i.cancel_state === 'refused') return html`<p>${i.cancel_note ?? ''}</p>`;
  if (i.state === 'rejected') return html`<p data-testid="nfse-error"><code>${i.error_code ?? ''}</code> ${i.error_message ?? ''}</p>`;
  return html`<p>${c.t('nfse.attempts', { n: i.attempts })}${i.error_message ? html` — ${i.error_message}` : ''}</p>`;
}

const retryable = (i: InvoiceSummary) => i.state === 'rejected' || (i.state === 'issued' && i.cancel_state === 'refused');

export function nfsePage(c: ViewCtx, v: { problems: InvoiceSummary[]; missing: ReconcileRow[] }): SafeHtml {
  return html`<h1>${c.t('nfse.title')}</h1>
<p class="muted">${c.t('nfse.intro')}</p>
<section class="card"><h2>${c.t('nfse.problems')}</h2>
${table(
  c,
  'nfse-problems',
  [
    c.t('nfse.col.note'),
    c.t('nfse.col.tenant'),
    c.t('nfse.col.charge'),
    { text: c.t('nfse.col.amount'), num: true },
    c.t('nfse.col.state'),
    c.t('nfse.col.detail'),
    '',
  ],
  v.problems.map(
    (
      i,
    ) => html`<tr data-testid="nfse-${i.id}"><td><code>${i.id}</code><br><small>DPS ${i.dps_serie}/${String(i.dps_number)}${i.access_key ? html`<br>${i.access_key}` : ''}</small></td>
<td><a href="/tenants/${i.tenant_id}">${i.tenant_id}</a></td><td><code>${i.pix_txid ?? (i.period ? String(i.period).slice(0, 7) : '')}</code></td>
<td class="num">${amount(c.lang, BigInt(i.amount_micros))}</td><td data-testid="nfse-state">${stateText(c, i)}</td><td>${detail(c, i)}</td>
<td>${retryable(i) ? html`<form method="post" action="/nfse/${i.id}/retry">${csrfField(c)}<button type="submit" data-testid="nfse-retry">${c.t('nfse.retry')}</button></form>` : ''}</td></tr>`,
  ),
)}
</section>
<section class="card"><h2>${c.t('nfse.missing')}</h2>
${table(
  c,
  'nfse-missing',
  [c.t('nfse.col.charge'), c.t('nfse.col.tenant'), { text: c.t('nfse.col.amount'), num: true }, c.t('nfse.col.paid'), c.t('nfse.col.reason')],
  v.missing.map(
    (m) => html`<tr data-testid="missing-${m.txid}"><td><code>${m.txid}</code></td><td><a href="/tenants/${m.tenant_id}">${m.tenant_id}</a></td>
<td class="num">${amount(c.lang, BigInt(m.amount_micros))}</td><td>${dateTime(c.lang, m.paid_at)}</td><td data-testid="missing-reason">${m.reason}</td></tr>`,
  ),
)}
</section>`;
}
