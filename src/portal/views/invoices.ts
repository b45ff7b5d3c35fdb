import type { BillingProfile, ProfileErrors, ProfileInput } from '../../nfse/profiles.ts';
import { documentLabel } from '../../nfse/profiles.ts';
import type { InvoiceSummary } from '../../nfse/store.ts';
import { dateTime, money } from '../../web/format.ts';
import { csrfField, html, raw, type SafeHtml } from '../../web/html.ts';
import type { MessageKey } from '../i18n/index.ts';
import type { ViewCtx } from './layout.ts';

// "Dados fiscais" (the billing profile: for whom the notas fiscais are issued, each change kept
// with its date) and "Notas fiscais" (each note with its XML and DANFSe PDF).

/** The form's fields in order: the profile's field, its name in the form, its label. */
const FIELDS: Array<{ key: keyof ProfileInput; label: MessageKey; hint?: MessageKey; optional?: boolean; attrs?: string }> = [
  { key: 'document', label: 'fiscal.document', hint: 'fiscal.document_hint', attrs: 'required maxlength="20" autocomplete="off"' },
  { key: 'name', label: 'fiscal.name', hint: 'fiscal.name_hint', attrs: 'required maxlength="300" autocomplete="organization"' },
  { key: 'email', label: 'fiscal.email', attrs: 'type="email" maxlength="80" autocomplete="email"' },
  { key: 'cep', label: 'fiscal.cep', attrs: 'required maxlength="9" inputmode="numeric" autocomplete="postal-code"' },
  { key: 'street', label: 'fiscal.street', attrs: 'required maxlength="255"' },
  { key: 'number', label: 'fiscal.number', attrs: 'required maxlength="60"' },
  { key: 'complement', label: 'fiscal.complement', optional: true, attrs: 'maxlength="156"' },
  { key: 'district', label: 'fiscal.district', attrs: 'required maxlength="60"' },
  { key: 'cityCode', label: 'fiscal.city', hint: 'fiscal.city_hint', attrs: 'required maxlength="7" inputmode="numeric"' },
  { key: 'uf', label: 'fiscal.uf', attrs: 'required maxlength="2"' },
  { key: 'municipalRegistration', label: 'fiscal.im', optional: true, attrs: 'maxlength="15"' },
];

/** The form's name of each field (snake case, as posted). */
export const FORM_NAMES: Record<keyof ProfileInput, string> = {
  document: 'document',
  name: 'name',
  email: 'email',
  cep: 'cep',
  street: 'street',
  number: 'number',
  complement: 'complement',
  district: 'district',
  cityCode: 'city_code',
  uf: 'uf',
  municipalRegistration: 'municipal_registration',
};

/** A saved profile as the form shows it. */
export function profileForm(p: BillingProfile): ProfileInput {
  return {
    document: documentLabel(p),
    name: p.name,
    email: p.email ?? '',
    cep: `${p.cep.slice(0, 5)}-${p.cep.slice(5)}`,
    street: p.street,
    number: p.number,
    complement: p.complement ?? '',
    district: p.district,
    cityCode: p.city_code,
    uf: p.uf,
    municipalRegistration: p.municipal_registration ?? '',
  };
}

export interface FiscalView {
  form: Partial<ProfileInput>;
  errors: ProfileErrors;
  history: BillingProfile[];
}

export function fiscalPage(c: ViewCtx, v: FiscalView): SafeHtml {
  const current = v.history[0];
  return html`<h1>${c.t('fiscal.title')}</h1>
<p class="muted">${c.t('fiscal.intro')}</p>
<section class="card narrow">
${current ? html`<p class="muted" data-testid="fiscal-since">${c.t('fiscal.since', { date: dateTime(c.lang, current.valid_from) })}</p>` : ''}
<form method="post" action="/dados-fiscais" data-testid="fiscal-form">
${csrfField(c)}
${FIELDS.map((f) => {
  const error = v.errors[f.key];
  return html`<label>${c.t(f.label)}<input type="text" name="${FORM_NAMES[f.key]}" value="${v.form[f.key] ?? ''}" ${raw(f.attrs ?? '')} ${error ? raw('aria-invalid="true"') : ''} data-testid="fiscal-${FORM_NAMES[f.key]}"></label>
${f.optional ? html`<small class="muted">${c.t('fiscal.optional')}</small>` : ''}${f.hint ? html`<small class="muted">${c.t(f.hint)}</small>` : ''}
${error ? html`<p class="error" data-testid="fiscal-error-${FORM_NAMES[f.key]}">${error}</p>` : ''}`;
})}
<button type="submit" data-testid="fiscal-save">${c.t('fiscal.save')}</button>
</form>
</section>
${
  v.history.length > 0
    ? html`<section class="card"><h2>${c.t('fiscal.history')}</h2>
<table data-testid="fiscal-history"><thead><tr><th>${c.t('fiscal.col.since')}</th><th>${c.t('fiscal.document')}</th><th>${c.t('fiscal.name')}</th><th>${c.t('fiscal.col.city')}</th></tr></thead><tbody>
${v.history.map((p) => html`<tr><td>${dateTime(c.lang, p.valid_from)}</td><td>${documentLabel(p)}</td><td>${p.name}</td><td>${p.city_code} / ${p.uf}</td></tr>`)}
</tbody></table></section>`
    : ''
}`;
}

/** A note's status as the tenant sees it. */
export function invoiceStatus(i: Pick<InvoiceSummary, 'state' | 'cancel_state'>): 'issued' | 'pending' | 'rejected' | 'cancelled' | 'cancelling' {
  if (i.state === 'issued' && i.cancel_state === 'done') return 'cancelled';
  if (i.state === 'issued' && i.cancel_state === 'pending') return 'cancelling';
  return i.state;
}

export function invoicesPage(c: ViewCtx, v: { invoices: InvoiceSummary[]; issuing: boolean }): SafeHtml {
  return html`<h1>${c.t('invoices.title')}</h1>
<p class="muted">${c.t('invoices.intro')}</p>
${v.issuing ? '' : html`<p class="muted" data-testid="invoices-off">${c.t('invoices.off')}</p>`}
<p><a href="/dados-fiscais">${c.t('invoices.profile_link')}</a></p>
<section class="card">
${
  v.invoices.length === 0
    ? html`<p class="muted" data-testid="invoices-none">${c.t('common.none')}</p>`
    : html`<table data-testid="invoices"><thead><tr><th>${c.t('invoices.col.number')}</th><th>${c.t('invoices.col.key')}</th><th>${c.t('invoices.col.date')}</th><th class="num">${c.t('invoices.col.amount')}</th><th>${c.t('invoices.col.status')}</th><th>${c.t('invoices.col.files')}</th></tr></thead><tbody>
${v.invoices.map((i) => {
  const status = invoiceStatus(i);
  const files =
    i.state === 'issued'
      ? html`<a href="/notas-fiscais/${i.id}/xml" download data-testid="invoice-xml">${c.t('invoices.xml')}</a> · <a href="/notas-fiscais/${i.id}/pdf" download data-testid="invoice-pdf">${c.t('invoices.pdf')}</a>`
      : '';
  return html`<tr data-testid="invoice-${i.id}"><td>${i.nfse_number ?? ''}</td><td><code class="key" data-testid="invoice-key">${i.access_key ?? ''}</code></td><td>${dateTime(c.lang, i.issued_at ?? i.created_at)}</td><td class="num">${money(c.lang, BigInt(i.amount_micros))}</td><td><span class="badge" data-testid="invoice-status">${c.t(`invoices.status.${status}`)}</span></td><td>${files}</td></tr>`;
})}
</tbody></table>`
}
</section>`;
}
