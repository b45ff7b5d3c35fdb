import { TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../../pix/limits.ts';
import type { ChargeRow } from '../../pix/service.ts';
import { csrfField, html, raw, type SafeHtml } from '../../web/html.ts';
import { dateTime, money, time } from '../../web/format.ts';
import type { ViewCtx } from './layout.ts';

export function topupPage(c: ViewCtx, charges: ChargeRow[], v: { amount?: string; profileFirst?: boolean } = {}): SafeHtml {
  return html`<h1>${c.t('topup.title')}</h1>
${
  v.profileFirst
    ? html`<section class="card narrow" data-testid="profile-first"><p>${c.t('fiscal.required_topup')}</p><p><a href="/dados-fiscais" data-testid="profile-first-link">${c.t('fiscal.required_link')}</a></p></section>`
    : html`<section class="card narrow">
<form method="post" action="/topup">
${csrfField(c)}
<label>${c.t('topup.amount')}<input type="text" name="amount" inputmode="decimal" required placeholder="50,00" value="${v.amount ?? ''}" data-testid="topup-amount"></label>
<small>${c.t('topup.limits', { min: money(c.lang, TOPUP_MIN_MICROS), max: money(c.lang, TOPUP_MAX_MICROS) })}</small>
<button type="submit" data-testid="topup-submit">${c.t('topup.button')}</button>
</form>
<p><a href="/topup/auto" data-testid="auto-link">${c.t('auto.link')}</a></p>
</section>`
}
<section class="card"><h2>${c.t('topup.history')}</h2>
${
  charges.length === 0
    ? html`<p class="muted">${c.t('common.none')}</p>`
    : html`<table data-testid="charges"><thead><tr><th>${c.t('ledger.when')}</th><th class="num">${c.t('ledger.amount')}</th><th>${c.t('keys.status')}</th><th></th></tr></thead><tbody>
${charges.map((ch) => html`<tr><td>${dateTime(c.lang, ch.created_at)}</td><td class="num">${money(c.lang, ch.amount_micros)}</td><td><span class="badge s-${ch.status}">${c.t(`status.${ch.status}` as never)}</span></td><td><a href="/topup/${ch.txid}">${ch.txid.slice(0, 8)}…</a></td></tr>`)}
</tbody></table>`
}
</section>`;
}

export function chargePage(c: ViewCtx, ch: ChargeRow, qr: string, o: { devMode: boolean; balance: bigint }): SafeHtml {
  const amount = money(c.lang, ch.amount_micros);
  const msgs = {
    ATIVA: c.t('topup.waiting'),
    CONCLUIDA: c.t('topup.paid', { amount }),
    EXPIRADA: c.t('topup.expired'),
    REMOVIDA_PELO_USUARIO_RECEBEDOR: c.t('topup.removed'),
    REMOVIDA_PELO_PSP: c.t('topup.removed'),
  };
  const statusLabels = Object.fromEntries(Object.keys(msgs).map((k) => [k, c.t(`status.${k}` as never)]));
  return html`<h1>${c.t('topup.charge_title', { amount })}</h1>
<section class="card charge" id="charge" data-txid="${ch.txid}" data-status="${ch.status}" data-msgs="${JSON.stringify(msgs)}" data-labels="${JSON.stringify(statusLabels)}" data-balance-label="${c.t('topup.new_balance', { balance: '{balance}' })}">
<p><span class="badge s-${ch.status}" data-testid="charge-status">${c.t(`status.${ch.status}` as never)}</span></p>
<p class="status-msg" data-testid="charge-message">${msgs[ch.status]}</p>
<p class="new-balance" data-testid="charge-balance" ${ch.status === 'CONCLUIDA' ? '' : raw('hidden')}>${c.t('topup.new_balance', { balance: money(c.lang, o.balance) })}</p>
<div class="pay" ${ch.status === 'ATIVA' ? '' : raw('hidden')}>
<img class="qr" data-testid="qr" alt="QR code Pix" src="${qr}" width="280" height="280">
<div>
<p>${c.t('topup.scan')}</p>
<label>${c.t('topup.copy_paste')}<textarea readonly rows="4" id="brcode" data-testid="brcode">${ch.br_code}</textarea></label>
<button type="button" data-copy="#brcode" data-copied="${c.t('common.copied')}" data-testid="copy-brcode">${c.t('common.copy')}</button>
<p class="muted" data-testid="expires">${c.t('topup.expires', { time: time(c.lang, ch.expires_at) })}</p>
${o.devMode ? html`<form method="post" action="/topup/${ch.txid}/simulate" class="dev" data-testid="dev-pay-form">${csrfField(c)}<p class="muted">${c.t('topup.dev_note')}</p><button type="submit" data-testid="dev-pay">${c.t('topup.dev_pay')}</button></form>` : ''}
</div>
</div>
<p><a href="/topup">${c.t('topup.back')}</a></p>
</section>`;
}

/** What a top-up shows until the address is verified: why, and a button to send the link again. */
export function verifyFirstPage(c: ViewCtx, v: { email: string; mailConfigured: boolean }): SafeHtml {
  return html`<h1>${c.t('topup.title')}</h1>
<section class="card narrow" data-testid="verify-first">
<h2>${c.t('topup.verify_first_title')}</h2>
<p>${c.t('topup.verify_first', { email: v.email })}</p>
${
  v.mailConfigured
    ? html`<form method="post" action="/verify/resend">${csrfField(c)}<button type="submit" data-testid="resend">${c.t('topup.resend')}</button></form>`
    : html`<p class="muted">${c.t('topup.mail_off')}</p>`
}
</section>`;
}
