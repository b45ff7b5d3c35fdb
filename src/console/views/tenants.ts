import type { ApiKeyRecord } from '../../db/keys.ts';
import { amount, dateTime } from '../../web/format.ts';
import { html, raw, type SafeHtml } from '../../web/html.ts';
import type { ConsoleCharge } from '../pix.ts';
import type { Member } from '../../db/members.ts';
import type { StatementRow, TenantDetail, TenantListRow } from '../tenants.ts';
import { csrfField, pager, table, type ViewCtx } from './layout.ts';
import { chargesTable } from './pix.ts';

export function statusBadge(c: ViewCtx, t: { suspended_at: Date | null }): SafeHtml {
  return t.suspended_at
    ? html`<span class="badge s-EXPIRADA" data-testid="tenant-status">${c.t('tenants.suspended')}</span>`
    : html`<span class="badge s-CONCLUIDA" data-testid="tenant-status">${c.t('tenants.active')}</span>`;
}

export function tenantsPage(c: ViewCtx, d: { q: string; rows: TenantListRow[]; page: number; hasMore: boolean }): SafeHtml {
  const rows = d.rows.map(
    (t) => html`<tr data-testid="tenant-row" data-tenant-id="${t.id}">
<td><a href="/tenants/${t.id}">${t.name}</a><br><small><code>${t.id}</code></small></td>
<td class="num">${amount(c.lang, t.balance_micros)}</td><td class="num">${amount(c.lang, t.held_micros)}</td>
<td class="num">${amount(c.lang, t.spend_today_micros)}</td><td class="num">${amount(c.lang, t.spend_30d_micros)}</td>
<td>${t.last_request_at ? dateTime(c.lang, t.last_request_at) : c.t('common.never')}</td>
<td class="num">${t.active_keys}</td><td>${statusBadge(c, t)}</td></tr>`,
  );
  return html`<h1>${c.t('tenants.title')}</h1>
<section class="card">
<form method="get" action="/tenants" class="search">
<label>${c.t('tenants.search')}<input type="search" name="q" value="${d.q}" maxlength="200" placeholder="${c.t('tenants.search_hint')}"></label>
<button type="submit">${c.t('tenants.search_button')}</button>
</form>
${table(
  c,
  'tenants',
  [
    c.t('tenants.name'),
    { text: c.t('tenants.balance'), num: true },
    { text: c.t('tenants.held'), num: true },
    { text: c.t('tenants.spend_today'), num: true },
    { text: c.t('tenants.spend_30d'), num: true },
    c.t('tenants.last_request'),
    { text: c.t('tenants.active_keys'), num: true },
    c.t('tenants.status'),
  ],
  rows,
)}
${pager(c, new URLSearchParams(d.q ? { q: d.q } : {}), '/tenants', d.page, d.hasMore)}
<p class="muted"><small>${c.t('tenants.days_note')}</small></p>
</section>`;
}

export interface TenantPageData {
  tenant: TenantDetail;
  keys: ApiKeyRecord[];
  members: Member[];
  charges: ConsoleCharge[];
  statement: StatementRow[];
  page: number;
  hasMore: boolean;
  /** One-time form nonces: a form sent twice moves money once. */
  nonces: { grant: string; adjust: string };
  /** Prefilled from a shortfall's link. */
  requestId?: string;
  form?: Record<string, string>;
}

export function tenantPage(c: ViewCtx, d: TenantPageData): SafeHtml {
  const t = d.tenant;
  return html`<h1 data-testid="tenant-name">${t.name} ${statusBadge(c, t)}</h1>
<p class="muted"><code>${t.id}</code> · ${c.t('tenant.created', { when: dateTime(c.lang, t.created_at) })}</p>
${t.suspended_at ? html`<p class="error" data-testid="suspension">${c.t('tenant.suspended_since', { when: dateTime(c.lang, t.suspended_at), reason: t.suspended_reason ?? '' })}</p>` : ''}
<section class="card stat">
<div><span class="muted">${c.t('tenants.balance')}</span><div class="big" data-testid="tenant-balance">${amount(c.lang, t.balance_micros)}</div></div>
<div><span class="muted">${c.t('tenants.held')}</span><div class="big" data-testid="tenant-held">${amount(c.lang, t.held_micros)}</div></div>
<div><span class="muted">${c.t('tenant.available')}</span><div class="big">${amount(c.lang, t.balance_micros - t.held_micros)}</div></div>
<div><span class="muted">${c.t('tenants.spend_today')} / ${c.t('tenants.spend_30d')}</span><div>${amount(c.lang, t.spend_today_micros)} / ${amount(c.lang, t.spend_30d_micros)}</div></div>
</section>
<div class="grid2">${grantForm(c, d)}${adjustForm(c, d)}</div>
${suspensionForm(c, t)}
<section class="card"><h2>${c.t('tenant.keys')}</h2>${keysTable(c, t.id, d.keys)}</section>
<section class="card"><h2>${c.t('tenant.members')}</h2>${membersTable(c, d.members)}</section>
<section class="card"><h2>${c.t('tenant.charges')}</h2>${chargesTable(c, d.charges, false)}</section>
<section class="card"><h2>${c.t('tenant.statement')}</h2>${statementTable(c, d.statement)}
${pager(c, new URLSearchParams(), `/tenants/${t.id}`, d.page, d.hasMore)}</section>`;
}

function grantForm(c: ViewCtx, d: TenantPageData): SafeHtml {
  const f = d.form ?? {};
  return html`<section class="card"><h2>${c.t('grant.title')}</h2>
<form method="post" action="/tenants/${d.tenant.id}/grant" data-testid="grant-form">
${csrfField(c)}<input type="hidden" name="nonce" value="${d.nonces.grant}">
<label>${c.t('grant.amount')}<input type="text" name="amount" inputmode="decimal" required placeholder="10,00" value="${f.grant_amount ?? ''}"></label>
<label>${c.t('grant.note')}<input type="text" name="note" maxlength="200" value="${f.grant_note ?? ''}"><small>${c.t('grant.note_hint')}</small></label>
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500" required value="${f.grant_reason ?? ''}"><small>${c.t('common.reason_hint')}</small></label>
<button type="submit">${c.t('grant.button')}</button>
</form></section>`;
}

function adjustForm(c: ViewCtx, d: TenantPageData): SafeHtml {
  const f = d.form ?? {};
  const kind = f.adjust_kind ?? (d.requestId ? 'debit' : 'credit');
  return html`<section class="card"><h2>${c.t('adjust.title')}</h2>
<form method="post" action="/tenants/${d.tenant.id}/adjust" data-testid="adjust-form">
${csrfField(c)}<input type="hidden" name="nonce" value="${d.nonces.adjust}">
<label>${c.t('adjust.kind')}<select name="kind">
<option value="credit"${kind === 'credit' ? raw(' selected') : ''}>${c.t('adjust.kind_credit')}</option>
<option value="debit"${kind === 'debit' ? raw(' selected') : ''}>${c.t('adjust.kind_debit')}</option>
</select></label>
<label>${c.t('adjust.amount')}<input type="text" name="amount" inputmode="decimal" required placeholder="0,012345" value="${f.adjust_amount ?? ''}"><small>${c.t('adjust.amount_hint')}</small></label>
<label>${c.t('adjust.request')}<input type="text" name="request_id" maxlength="100" value="${f.adjust_request ?? d.requestId ?? ''}"><small>${c.t('adjust.request_hint')}</small></label>
<label>${c.t('grant.note')}<input type="text" name="note" maxlength="200" value="${f.adjust_note ?? ''}"></label>
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500" required value="${f.adjust_reason ?? ''}"></label>
<button type="submit">${c.t('adjust.button')}</button>
</form></section>`;
}

function suspensionForm(c: ViewCtx, t: TenantDetail): SafeHtml {
  return t.suspended_at
    ? html`<section class="card"><h2>${c.t('suspend.reactivate_title')}</h2><p>${c.t('suspend.reactivate_text')}</p>
<form method="post" action="/tenants/${t.id}/reactivate" data-testid="reactivate-form">${csrfField(c)}
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500" required></label>
<button type="submit">${c.t('suspend.reactivate_button')}</button></form></section>`
    : html`<section class="card"><h2>${c.t('suspend.title')}</h2><p>${c.t('suspend.text')}</p>
<form method="post" action="/tenants/${t.id}/suspend" data-testid="suspend-form">${csrfField(c)}
<label>${c.t('common.reason')}<input type="text" name="reason" maxlength="500" required></label>
<button type="submit" class="danger">${c.t('suspend.button')}</button></form></section>`;
}

function keysTable(c: ViewCtx, tenantId: string, keys: ApiKeyRecord[]): SafeHtml {
  const now = Date.now();
  const state = (k: ApiKeyRecord) =>
    k.revoked_at ? c.t('keys.revoked') : k.expires_at && new Date(k.expires_at).getTime() <= now ? c.t('keys.expired') : c.t('keys.active');
  return table(
    c,
    'keys',
    [c.t('keys.label'), c.t('keys.hint'), c.t('keys.models'), { text: c.t('keys.usage'), num: true }, c.t('keys.last_used'), c.t('keys.status'), ''],
    keys.map(
      (
        k,
      ) => html`<tr data-testid="key-row" data-key-id="${k.id}"><td>${k.label || '—'}<br><small><code>${k.id}</code></small></td><td><code>${k.key_hint}</code></td>
<td>${k.models === null ? c.t('keys.all_models') : k.models.join(', ')}</td><td class="num">${amount(c.lang, k.usage_micros)}</td>
<td>${k.last_used_at ? dateTime(c.lang, k.last_used_at) : c.t('common.never')}</td><td>${state(k)}</td>
<td>${
        k.revoked_at
          ? ''
          : html`<form method="post" action="/tenants/${tenantId}/keys/${k.id}/revoke" class="inline">${csrfField(c)}<button type="submit" class="danger small">${c.t('keys.revoke')}</button></form>`
      }</td></tr>`,
    ),
  );
}

function membersTable(c: ViewCtx, members: Member[]): SafeHtml {
  return table(
    c,
    'members',
    [c.t('members.email'), c.t('members.role'), c.t('members.since'), c.t('members.verified')],
    members.map(
      (m) =>
        html`<tr><td>${m.email}</td><td>${m.role}</td><td>${dateTime(c.lang, m.created_at)}</td><td>${m.email_verified_at ? c.t('common.yes') : c.t('common.no')}</td></tr>`,
    ),
  );
}

const SOURCES = ['request', 'grant', 'pix', 'pix_refund', 'adjustment'] as const;
const sourceLabel = (c: ViewCtx, s: string) => ((SOURCES as readonly string[]).includes(s) ? c.t(`source.${s as (typeof SOURCES)[number]}`) : s);

function statementTable(c: ViewCtx, rows: StatementRow[]): SafeHtml {
  const what = (r: StatementRow) => {
    const ref = r.request_id ?? r.ref_request_id;
    return html`${sourceLabel(c, r.source)}${r.model ? html` · <code>${r.model}</code>` : ''}${ref ? html`<br><small><code>${ref}</code></small>` : ''}${r.note ? html`<br><small>${r.note}</small>` : ''}${
      r.cost_micros !== null && r.cost_micros > r.amount_micros
        ? html`<br><small class="warn">${c.t('statement.shortfall', { cost: amount(c.lang, r.cost_micros) })}</small>`
        : ''
    }`;
  };
  return table(
    c,
    'statement',
    [c.t('statement.when'), c.t('statement.what'), { text: c.t('statement.amount'), num: true }, { text: c.t('statement.balance_after'), num: true }],
    rows.map(
      (r) => html`<tr data-testid="statement-row" data-source="${r.source}" data-kind="${r.kind}"><td>${dateTime(c.lang, r.created_at)}</td><td>${what(r)}</td>
<td class="num ${r.kind}" data-testid="statement-amount">${r.kind === 'credit' ? '+' : '−'}${amount(c.lang, r.amount_micros)}</td><td class="num">${amount(c.lang, r.balance_after_micros)}</td></tr>`,
    ),
  );
}
