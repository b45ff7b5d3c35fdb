import type { ApiKeyRecord } from '../../db/keys.ts';
import type { ModelRecord } from '../../db/models.ts';
import { csrfField, html, raw, type SafeHtml } from '../../web/html.ts';
import { amount, dateTime, int, money } from '../../web/format.ts';
import type { ViewCtx } from './layout.ts';

function allowlist(c: ViewCtx, k: ApiKeyRecord) {
  return k.models === null ? html`<em>${c.t('common.all_models')}</em>` : html`${k.models.map((m, i) => html`${i ? ', ' : ''}<code>${m}</code>`)}`;
}

/** The expiries offered when creating a key (durations from now; see src/auth/key-options.ts). */
export const EXPIRY_CHOICES = ['1d', '7d', '30d', '90d', '365d'] as const;
/** Data countries offered: any, or Brazil (a key's requests served only by deployments there). */
export const DATA_COUNTRIES = ['', 'BR'] as const;
const dataCountryText = (c: ViewCtx, country: string | null | undefined) =>
  country === 'BR' ? c.t('keys.data_country_BR') : country ? country : c.t('keys.data_country_any');

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
    /** whether the member may set a key's data country (owner and admin) */
    setsDataCountry?: boolean;
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
<table data-testid="keys-table"><thead><tr><th>${c.t('keys.label')}</th><th>${c.t('keys.prefix')}</th><th>${c.t('keys.allowlist')}</th><th>${c.t('keys.limit_col')}</th><th>${c.t('keys.rate_col')}</th><th>${c.t('keys.expires_col')}</th><th>${c.t('keys.data_country')}</th><th class="num">${c.t('keys.usage')}</th><th>${c.t('keys.last_used')}</th><th>${c.t('keys.status')}</th>${creators ? html`<th>${c.t('keys.created_by')}</th>` : ''}<th></th></tr></thead><tbody>
${d.keys.length === 0 ? html`<tr><td colspan="${creators ? 12 : 11}" class="muted">${c.t('common.none')}</td></tr>` : ''}
${d.keys.map(
  (k) => html`<tr data-key-id="${k.id}" data-testid="key-row">
<td>${k.label}</td><td><code>${k.key_hint}</code></td><td>${allowlist(c, k)}</td><td>${limitText(c, k)}</td>
<td data-testid="key-rate">${rateText(c, k)}</td><td data-testid="key-expires">${k.expires_at ? dateTime(c.lang, new Date(k.expires_at)) : c.t('common.never')}</td>
<td data-testid="key-data-country">${dataCountryText(c, k.data_country)}</td>
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
${
  d.setsDataCountry
    ? html`<label>${c.t('keys.data_country')}<select name="data_country" data-testid="key-data-country-select">
${DATA_COUNTRIES.map((dc) => html`<option value="${dc}" ${(f.data_country ?? '') === dc ? raw('selected') : ''}>${dataCountryText(c, dc)}</option>`)}
</select><small>${c.t('keys.data_country_hint')}</small></label>`
    : ''
}
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
