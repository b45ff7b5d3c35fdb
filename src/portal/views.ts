import type { ApiKeyRecord } from '../db/keys.ts';
import type { ModelRecord } from '../db/models.ts';
import { TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../pix/limits.ts';
import type { ChargeRow } from '../pix/service.ts';
import { csrfField } from '../web/html.ts';
import { frame, langLink, pager } from '../web/layout.ts';
import { html, raw, type SafeHtml } from '../web/html.ts';
import type { Lang, T } from './i18n/index.ts';
import { amount, dateTime, int, money, price, time } from './format.ts';
import type { LedgerRow } from './usage.ts';
import { may, type Role } from './roles.ts';

export interface ViewCtx {
  t: T;
  lang: Lang;
  path: string;
  csrf: string;
  email?: string;
  balance?: bigint;
  /** the signed-in member's role: the nav shows what it may open (the server checks every route anyway) */
  role?: Role;
}

/** Whether the signed-in member's role may do this (for links and buttons; routes check on the server). */
export const allows = (c: ViewCtx, action: Parameters<typeof may>[1]) => c.role !== undefined && may(c.role, action);

export { csrfField };

export function layout(c: ViewCtx, title: string, body: SafeHtml, opts: { flash?: string | null; error?: string | null } = {}): string {
  const header = c.email
    ? html`<nav>
        <a href="/dashboard">${c.t('nav.dashboard')}</a>
        ${allows(c, 'topup') ? html`<a href="/topup">${c.t('nav.topup')}</a>` : ''}
        ${allows(c, 'keys') ? html`<a href="/keys">${c.t('nav.keys')}</a>` : ''}
        ${allows(c, 'statement') ? html`<a href="/ledger">${c.t('nav.ledger')}</a>` : ''}
        <a href="/models">${c.t('nav.models')}</a>
        ${allows(c, 'members') ? html`<a href="/members">${c.t('nav.members')}</a>` : ''}
        <a href="/account">${c.t('nav.account')}</a>
        ${allows(c, 'notifications') ? html`<a href="/notifications">${c.t('nav.notifications')}</a>` : ''}
      </nav>
      <div class="who">
        <span class="balance" data-testid="header-balance">${c.t('common.balance')}: <strong>${money(c.lang, c.balance ?? 0n)}</strong></span>
        <span class="email">${c.email}</span>
        <form method="post" action="/logout" class="inline">${csrfField(c)}<button type="submit" class="link" data-testid="logout">${c.t('nav.logout')}</button></form>
        ${langLink(c, 'lang-switch')}
      </div>`
    : html`<nav><a href="/login">${c.t('nav.login')}</a><a href="/signup">${c.t('nav.signup')}</a></nav><div class="who">${langLink(c, 'lang-switch')}</div>`;
  return frame({ lang: c.lang, title, brand: 'catraca', stylesheets: ['/static/portal.css'], scripts: ['/static/portal.js'], header, ...opts }, body);
}

export function loginPage(c: ViewCtx, v: { email?: string } = {}): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.login_title')}</h1>
<form method="post" action="/login">
${csrfField(c)}
<label>${c.t('auth.email')}<input type="email" name="email" autocomplete="username" required value="${v.email ?? ''}"></label>
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="current-password" required></label>
<button type="submit">${c.t('auth.login_button')}</button>
</form>
<p><a href="/signup">${c.t('auth.no_account')}</a></p>
</section>`;
}

export function signupPage(c: ViewCtx, v: { email?: string; org?: string } = {}): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.signup_title')}</h1>
<form method="post" action="/signup">
${csrfField(c)}
<label>${c.t('auth.email')}<input type="email" name="email" autocomplete="username" required value="${v.email ?? ''}"></label>
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="new-password" minlength="10" required><small>${c.t('auth.password_hint')}</small></label>
<label>${c.t('auth.org_name')}<input type="text" name="org" maxlength="100" value="${v.org ?? ''}"></label>
<button type="submit">${c.t('auth.signup_button')}</button>
</form>
<p><a href="/login">${c.t('auth.have_account')}</a></p>
</section>`;
}

export function topupPage(c: ViewCtx, charges: ChargeRow[], v: { amount?: string } = {}): SafeHtml {
  return html`<h1>${c.t('topup.title')}</h1>
<section class="card narrow">
<form method="post" action="/topup">
${csrfField(c)}
<label>${c.t('topup.amount')}<input type="text" name="amount" inputmode="decimal" required placeholder="50,00" value="${v.amount ?? ''}" data-testid="topup-amount"></label>
<small>${c.t('topup.limits', { min: money(c.lang, TOPUP_MIN_MICROS), max: money(c.lang, TOPUP_MAX_MICROS) })}</small>
<button type="submit" data-testid="topup-submit">${c.t('topup.button')}</button>
</form>
</section>
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

function allowlist(c: ViewCtx, k: ApiKeyRecord) {
  return k.models === null ? html`<em>${c.t('common.all_models')}</em>` : html`${k.models.map((m, i) => html`${i ? ', ' : ''}<code>${m}</code>`)}`;
}

/** The expiries offered when creating a key (durations from now; see src/auth/key-options.ts). */
export const EXPIRY_CHOICES = ['1d', '7d', '30d', '90d', '365d'] as const;
/** Rate-limit intervals offered: per second, minute, hour, day. */
export const RATE_INTERVALS = ['s', 'm', 'h', 'd'] as const;

function rateText(c: ViewCtx, k: ApiKeyRecord) {
  if (k.rate_limit_requests === null || k.rate_limit_interval_s === null) return c.t('keys.no_rate_limit');
  const unit = ({ 1: 's', 60: 'm', 3600: 'h', 86400: 'd' } as Record<number, string>)[k.rate_limit_interval_s];
  return unit
    ? c.t(`keys.rate_per_${unit}` as never, { n: int(c.lang, k.rate_limit_requests) })
    : c.t('keys.rate_per_seconds', { n: int(c.lang, k.rate_limit_requests), s: int(c.lang, k.rate_limit_interval_s) });
}

function expired(k: ApiKeyRecord): boolean {
  return k.expires_at !== null && new Date(k.expires_at).getTime() <= Date.now();
}

function limitText(c: ViewCtx, k: ApiKeyRecord) {
  if (k.limit_micros === null) return c.t('keys.no_limit');
  const reset = k.limit_reset ? ` (${c.t(`keys.reset_${k.limit_reset}` as never)})` : '';
  return `${money(c.lang, k.limit_micros)}${reset}`;
}

export function keysPage(
  c: ViewCtx,
  d: {
    keys: Array<ApiKeyRecord & { windowUsage: bigint }>;
    models: ModelRecord[];
    created?: { key: string; label: string } | null;
    form?: Record<string, string | string[]>;
    /** owner and admin see who created each key: portal user id → e-mail of the tenant's members */
    creators?: Map<string, string> | null;
  },
): SafeHtml {
  const f = d.form ?? {};
  const creators = d.creators;
  const creatorCell = (k: ApiKeyRecord) =>
    creators ? html`<td data-testid="key-creator">${k.created_by === null ? '—' : (creators.get(k.created_by) ?? c.t('members.former'))}</td>` : '';
  const picked = new Set(Array.isArray(f.models) ? f.models : f.models ? [f.models] : []);
  return html`<h1>${c.t('keys.title')}</h1>
${
  d.created
    ? html`<section class="card created" data-testid="created-key">
<h2>${c.t('keys.created_title')}: ${d.created.label}</h2>
<p class="warning">⚠ ${c.t('keys.created_warning')}</p>
<div class="copyrow"><input type="text" readonly id="newkey" value="${d.created.key}" data-testid="new-key" autocomplete="off" spellcheck="false">
<button type="button" data-copy="#newkey" data-copied="${c.t('common.copied')}" data-testid="copy-key">${c.t('common.copy')}</button></div>
</section>`
    : ''
}
<section class="card">
<table data-testid="keys-table"><thead><tr><th>${c.t('keys.label')}</th><th>${c.t('keys.prefix')}</th><th>${c.t('keys.allowlist')}</th><th>${c.t('keys.limit_col')}</th><th>${c.t('keys.rate_col')}</th><th>${c.t('keys.expires_col')}</th><th class="num">${c.t('keys.usage')}</th><th>${c.t('keys.last_used')}</th><th>${c.t('keys.status')}</th>${creators ? html`<th>${c.t('keys.created_by')}</th>` : ''}<th></th></tr></thead><tbody>
${d.keys.length === 0 ? html`<tr><td colspan="${creators ? 11 : 10}" class="muted">${c.t('common.none')}</td></tr>` : ''}
${d.keys.map(
  (k) => html`<tr data-key-id="${k.id}" data-testid="key-row">
<td>${k.label}</td><td><code>${k.key_hint}</code></td><td>${allowlist(c, k)}</td><td>${limitText(c, k)}</td>
<td data-testid="key-rate">${rateText(c, k)}</td><td data-testid="key-expires">${k.expires_at ? dateTime(c.lang, new Date(k.expires_at)) : c.t('common.never')}</td>
<td class="num">${amount(c.lang, k.usage_micros)}${k.limit_reset ? html`<br><small>${amount(c.lang, k.windowUsage)} ${c.t(`keys.window_${k.limit_reset}` as never)}</small>` : ''}</td>
<td>${k.last_used_at ? dateTime(c.lang, k.last_used_at) : c.t('common.never')}</td>
<td>${k.revoked_at ? html`<span class="badge s-EXPIRADA">${c.t('keys.revoked')}</span>` : expired(k) ? html`<span class="badge s-EXPIRADA">${c.t('keys.expired')}</span>` : html`<span class="badge s-CONCLUIDA">${c.t('keys.active')}</span>`}</td>
${creatorCell(k)}
<td>${k.revoked_at ? '' : html`<a class="button danger small" href="/keys/${k.id}/revoke" data-testid="revoke-link">${c.t('keys.revoke')}</a>`}</td>
</tr>`,
)}
</tbody></table>
</section>
<section class="card">
<h2>${c.t('keys.create')}</h2>
<form method="post" action="/keys" data-testid="create-key-form">
${csrfField(c)}
<label>${c.t('keys.label')}<input type="text" name="label" maxlength="100" required value="${(f.label as string) ?? ''}" data-testid="key-label"><small>${c.t('keys.label_hint')}</small></label>
<fieldset><legend>${c.t('keys.models')}</legend>
<label class="check"><input type="radio" name="scope" value="all" ${f.scope === 'some' ? '' : raw('checked')} data-testid="scope-all"> ${c.t('keys.models_all')}</label>
<label class="check"><input type="radio" name="scope" value="some" ${f.scope === 'some' ? raw('checked') : ''} data-testid="scope-some"> ${c.t('keys.models_pick')}</label>
<div class="models">${d.models.map((m) => html`<label class="check"><input type="checkbox" name="models" value="${m.id}" ${picked.has(m.id) ? raw('checked') : ''}> <code>${m.id}</code></label>`)}</div>
</fieldset>
<div class="row">
<label>${c.t('keys.limit')}<input type="text" name="limit" inputmode="decimal" placeholder="100,00" value="${(f.limit as string) ?? ''}" data-testid="key-limit"></label>
<label>${c.t('keys.limit_reset')}<select name="limit_reset" data-testid="key-limit-reset">
${(['', 'daily', 'weekly', 'monthly'] as const).map((r) => html`<option value="${r}" ${f.limit_reset === r ? raw('selected') : ''}>${c.t(r ? (`keys.reset_${r}` as never) : 'keys.reset_never')}</option>`)}
</select></label>
</div>
<div class="row">
<label>${c.t('keys.rate_limit')}<input type="number" name="rate_requests" min="1" max="1000000" step="1" inputmode="numeric" placeholder="60" value="${(f.rate_requests as string) ?? ''}" data-testid="key-rate-requests"><small>${c.t('keys.rate_limit_hint')}</small></label>
<label>${c.t('keys.rate_interval')}<select name="rate_interval" data-testid="key-rate-interval">
${RATE_INTERVALS.map((u) => html`<option value="${u}" ${(f.rate_interval ?? 'm') === u ? raw('selected') : ''}>${c.t(`keys.interval_${u}` as never)}</option>`)}
</select></label>
<label>${c.t('keys.expires')}<select name="expires" data-testid="key-expires">
${(['', ...EXPIRY_CHOICES] as const).map((e) => html`<option value="${e}" ${(f.expires ?? '') === e ? raw('selected') : ''}>${c.t(e ? (`keys.expires_${e}` as never) : 'keys.expires_never')}</option>`)}
</select></label>
</div>
<button type="submit" data-testid="create-key">${c.t('keys.create')}</button>
</form>
</section>`;
}

export function revokeConfirmPage(c: ViewCtx, k: ApiKeyRecord): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('keys.revoke_title', { label: k.label || k.key_hint })}</h1>
<p><code>${k.key_hint}</code></p>
<p>${c.t('keys.revoke_confirm_text')}</p>
<form method="post" action="/keys/${k.id}/revoke">
${csrfField(c)}
<button type="submit" class="danger" data-testid="confirm-revoke">${c.t('keys.revoke_confirm')}</button>
<a href="/keys">${c.t('common.cancel')}</a>
</form>
</section>`;
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

export function modelsPage(c: ViewCtx, models: ModelRecord[]): SafeHtml {
  return html`<h1>${c.t('models.title')}</h1>
<section class="card">
<table data-testid="models"><thead><tr><th>${c.t('models.id')}</th><th class="num">${c.t('models.input')}</th><th class="num">${c.t('models.output')}</th><th class="num">${c.t('models.context')}</th></tr></thead><tbody>
${models.length === 0 ? html`<tr><td colspan="4" class="muted">${c.t('common.none')}</td></tr>` : ''}
${models.map((m) => html`<tr><td><code>${m.id}</code>${m.name ? html`<br><small>${m.name}</small>` : ''}</td><td class="num">${price(c.lang, m.input_price)}</td><td class="num">${price(c.lang, m.output_price)}</td><td class="num">${int(c.lang, m.context_length)}</td></tr>`)}
</tbody></table>
</section>`;
}

export function messagePage(c: ViewCtx, title: string, text: string, link: { href: string; label: string } = { href: '/', label: 'catraca' }): SafeHtml {
  return html`<section class="card narrow"><h1>${title}</h1><p data-testid="message">${text}</p><p><a href="${link.href}">${link.label}</a></p></section>`;
}

/** After a sign-up, whether or not the address had an account: the same page. */
export function checkEmailPage(c: ViewCtx, v: { email: string; devMail: boolean }): SafeHtml {
  return html`<section class="card narrow" data-testid="check-email">
<h1>${c.t('auth.check_email_title')}</h1>
<p>${c.t('auth.check_email', { email: v.email })}</p>
${v.devMail ? html`<p class="muted">${c.t('auth.dev_mail')} <a href="/dev/mail">/dev/mail</a>.</p>` : ''}
<p><a class="button" href="/login">${c.t('auth.login_button')}</a></p>
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

export function resetPage(c: ViewCtx, token: string): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('auth.reset_title')}</h1>
<form method="post" action="/reset">
${csrfField(c)}
<input type="hidden" name="token" value="${token}">
<label>${c.t('auth.password')}<input type="password" name="password" autocomplete="new-password" minlength="10" required><small>${c.t('auth.password_hint')}</small></label>
<button type="submit">${c.t('auth.reset_button')}</button>
</form>
</section>`;
}

/** Development only: the e-mails the embedded SMTP sink received (links clickable). */
export function devMailPage(c: ViewCtx, messages: Array<{ id: string; date: string; to: string[]; subject: string; text: string }>): SafeHtml {
  const linked = (text: string) => text.split(/(https?:\/\/[^\s<>"]+)/g).map((part, i) => (i % 2 === 1 ? html`<a href="${part}">${part}</a>` : html`${part}`));
  return html`<h1>${c.t('dev.mail_title')}</h1>
<p class="muted">${c.t('dev.mail_note')}</p>
${messages.length === 0 ? html`<p class="muted">${c.t('common.none')}</p>` : ''}
${messages.map(
  (m) => html`<article class="card" data-testid="mail" data-to="${m.to.join(',')}">
<h2>${m.subject}</h2>
<p class="muted">${m.to.join(', ')} · ${m.date}</p>
<pre class="mail">${linked(m.text)}</pre>
</article>`,
)}`;
}
