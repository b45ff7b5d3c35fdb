import { EVENT_TYPES } from '../../notify/events.ts';
import type { EndpointView, LogRow, TenantSettings } from '../../notify/settings.ts';
import { dateTime, int } from '../../web/format.ts';
import { html, raw, type SafeHtml } from '../../web/html.ts';
import type { MessageKey } from '../i18n/index.ts';
import type { ViewCtx } from './layout.ts';

// The Notifications page (/notifications): webhook endpoints, the signing secret shown once, the
// low-balance threshold and the e-mailed events, the delivery log with its replay buttons.

const csrfField = (c: ViewCtx) => html`<input type="hidden" name="_csrf" value="${c.csrf}">`;
const eventName = (c: ViewCtx, type: string) => c.t(`notify.event.${type}` as MessageKey);

/** R$ with 2 decimals as typed in the form (50,00 / 50.00). */
function thresholdText(c: ViewCtx, micros: bigint | null): string {
  if (micros === null) return '';
  const s = `${micros / 1_000_000n}${c.lang === 'en' ? '.' : ','}${((micros % 1_000_000n) / 10_000n).toString().padStart(2, '0')}`;
  return s;
}

function eventChecks(c: ViewCtx, name: string, checked: Set<string>, testid: string): SafeHtml {
  return html`${EVENT_TYPES.map(
    (e) =>
      html`<label class="check"><input type="checkbox" name="${name}" value="${e}" ${checked.has(e) ? raw('checked') : ''} data-testid="${testid}-${e}"> ${eventName(c, e)} <code>${e}</code></label>`,
  )}`;
}

export interface NotificationsView {
  settings: TenantSettings;
  endpoints: EndpointView[];
  log: LogRow[];
  /** the secret of the endpoint just created or rotated: shown this once */
  secret?: { url: string; secret: string } | null;
  form?: Record<string, string | string[]>;
}

export function notificationsPage(c: ViewCtx, v: NotificationsView): SafeHtml {
  return html`<h1>${c.t('notify.title')}</h1>
<p class="muted">${c.t('notify.intro')}</p>
${v.secret ? secretCard(c, v.secret) : ''}
${settingsCard(c, v.settings, v.form)}
${endpointsCard(c, v.endpoints, v.form)}
${logCard(c, v.log)}
<p class="muted">${c.t('notify.docs')}</p>`;
}

function secretCard(c: ViewCtx, s: { url: string; secret: string }): SafeHtml {
  return html`<section class="card created" data-testid="webhook-secret-card">
<h2>${c.t('notify.secret_title')}: <code>${s.url}</code></h2>
<p class="warning">⚠ ${c.t('notify.secret_once')}</p>
<div class="copyrow"><input type="text" readonly id="whsecret" value="${s.secret}" data-testid="webhook-secret" autocomplete="off" spellcheck="false">
<button type="button" data-copy="#whsecret" data-copied="${c.t('common.copied')}">${c.t('common.copy')}</button></div>
</section>`;
}

function settingsCard(c: ViewCtx, s: TenantSettings, form?: Record<string, string | string[]>): SafeHtml {
  const threshold = typeof form?.threshold === 'string' ? form.threshold : thresholdText(c, s.lowBalanceMicros);
  return html`<section class="card">
<h2>${c.t('notify.settings')}</h2>
<form method="post" action="/notifications/settings" data-testid="notify-settings-form">
${csrfField(c)}
<label>${c.t('notify.threshold')}<input type="text" name="threshold" inputmode="decimal" placeholder="50,00" value="${threshold}" data-testid="low-balance-threshold"><small>${c.t('notify.threshold_hint')}</small></label>
<fieldset><legend>${c.t('notify.email_events')}</legend>${eventChecks(c, 'email_events', new Set(s.emailEvents), 'email')}</fieldset>
<button type="submit" data-testid="save-notify-settings">${c.t('notify.save')}</button>
</form>
</section>`;
}

function endpointsCard(c: ViewCtx, endpoints: EndpointView[], form?: Record<string, string | string[]>): SafeHtml {
  const picked = new Set(Array.isArray(form?.events) ? form.events : form?.events ? [form.events] : EVENT_TYPES);
  return html`<section class="card">
<h2>${c.t('notify.endpoints')}</h2>
<table data-testid="endpoints-table"><thead><tr><th>URL</th><th>${c.t('notify.events')}</th><th>${c.t('notify.log_state')}</th><th></th></tr></thead><tbody>
${endpoints.length === 0 ? html`<tr><td colspan="4" class="muted">${c.t('common.none')}</td></tr>` : ''}
${endpoints.map(
  (e) => html`<tr data-testid="endpoint-row" data-endpoint-id="${e.id}">
<td><code>${e.url}</code></td><td>${e.events.map((t, i) => html`${i ? ', ' : ''}<code>${t}</code>`)}</td>
<td>${e.enabled ? c.t('notify.enabled') : html`${c.t('notify.disabled')}${e.disabled_reason ? html`<br><small>${e.disabled_reason}</small>` : ''}`}</td>
<td class="actions">
<form method="post" action="/notifications/endpoints/${e.id}/rotate" class="inline">${csrfField(c)}<button type="submit" class="small" data-testid="rotate-secret">${c.t('notify.rotate')}</button></form>
<form method="post" action="/notifications/endpoints/${e.id}/toggle" class="inline">${csrfField(c)}<button type="submit" class="small" data-testid="toggle-endpoint">${e.enabled ? c.t('notify.disable') : c.t('notify.enable')}</button></form>
<form method="post" action="/notifications/endpoints/${e.id}/delete" class="inline">${csrfField(c)}<button type="submit" class="small danger" data-testid="delete-endpoint">${c.t('notify.delete')}</button></form>
</td></tr>`,
)}
</tbody></table>
<h3>${c.t('notify.add')}</h3>
<form method="post" action="/notifications/endpoints" data-testid="add-endpoint-form">
${csrfField(c)}
<label>${c.t('notify.url')}<input type="url" name="url" maxlength="2000" required placeholder="https://example.com.br/webhooks/catraca" value="${typeof form?.url === 'string' ? form.url : ''}" data-testid="endpoint-url"></label>
<fieldset><legend>${c.t('notify.events')}</legend>${eventChecks(c, 'events', picked as Set<string>, 'endpoint-event')}</fieldset>
<button type="submit" data-testid="add-endpoint">${c.t('notify.add')}</button>
</form>
</section>`;
}

function logCard(c: ViewCtx, log: LogRow[]): SafeHtml {
  return html`<section class="card">
<h2>${c.t('notify.log')}</h2>
<table data-testid="delivery-log"><thead><tr><th>${c.t('notify.log_when')}</th><th>${c.t('notify.log_event')}</th><th>${c.t('notify.log_to')}</th><th class="num">${c.t('notify.log_attempt')}</th><th>${c.t('notify.log_status')}</th><th class="num">${c.t('notify.log_duration')}</th><th>${c.t('notify.log_error')}</th><th>${c.t('notify.log_state')}</th><th></th></tr></thead><tbody>
${log.length === 0 ? html`<tr><td colspan="9" class="muted">${c.t('common.none')}</td></tr>` : ''}
${log.map(
  (r) => html`<tr data-testid="log-row" data-delivery-id="${r.delivery_id}" data-event-id="${r.event_id}">
<td>${dateTime(c.lang, r.created_at)}</td><td><code>${r.type}</code><br><small><code>${r.event_id}</code></small></td>
<td>${r.channel === 'email' ? c.t('notify.email') : html`<code>${r.url ?? ''}</code>`}</td><td class="num">${int(c.lang, r.attempt)}</td>
<td data-testid="log-status">${r.status_code ?? '—'}</td><td class="num">${int(c.lang, r.duration_ms)} ms</td><td><small>${r.error ?? ''}</small></td>
<td>${c.t(`notify.state.${r.state}` as MessageKey)}</td>
<td>${r.channel === 'webhook' ? html`<form method="post" action="/notifications/deliveries/${r.delivery_id}/replay" class="inline">${csrfField(c)}<button type="submit" class="small" data-testid="replay">${c.t('notify.replay')}</button></form>` : ''}</td>
</tr>`,
)}
</tbody></table>
</section>`;
}
