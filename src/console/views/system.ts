import type { LedgerCheckResult } from '../../billing/ledger-check.ts';
import { amount, dateTime, int } from '../../web/format.ts';
import { html, raw, type SafeHtml } from '../../web/html.ts';
import { AUDIT_ACTIONS, type AuditRow } from '../audit.ts';
import type { Operator, OperatorSetup } from '../auth.ts';
import { type ConsoleCharge, PIX_STATES, type PixState, type ReconcilerRun } from '../pix.ts';
import { csrfField, pager, table, type ViewCtx } from './layout.ts';
import { chargesTable } from './pix.ts';

export function pixPage(
  c: ViewCtx,
  d: {
    state: PixState | null;
    summary: Record<PixState, { count: number; micros: bigint }>;
    charges: ConsoleCharge[];
    page: number;
    hasMore: boolean;
    reconciler: ReconcilerRun | null;
  },
): SafeHtml {
  const r = d.reconciler;
  return html`<h1>${c.t('pix.title')}</h1>
<section class="card"><p data-testid="reconciler">${
    r
      ? c.t('pix.reconciler', { when: dateTime(c.lang, r.last_run_at), checked: int(c.lang, r.checked), failed: int(c.lang, r.failed) })
      : c.t('pix.reconciler_never')
  }</p>
<div class="chips">${[null, ...PIX_STATES].map(
    (s) =>
      html`<a class="chip${d.state === s ? ' on' : ''}" href="/pix${s ? `?state=${s}` : ''}">${s ? c.t(`state.${s}`) : c.t('pix.all')}${
        s ? html` <span class="muted">${int(c.lang, d.summary[s].count)} · ${amount(c.lang, d.summary[s].micros)}</span>` : ''
      }</a>`,
  )}</div></section>
<section class="card">${chargesTable(c, d.charges, true)}${pager(c, new URLSearchParams(d.state ? { state: d.state } : {}), '/pix', d.page, d.hasMore)}</section>`;
}

export function ledgerCheckPage(c: ViewCtx, result: LedgerCheckResult | null): SafeHtml {
  return html`<h1>${c.t('check.title')}</h1>
<section class="card"><p>${c.t('check.text')}</p>
<form method="post" action="/ledger-check">${csrfField(c)}<button type="submit">${c.t('check.button')}</button></form></section>
${
  result
    ? html`<section class="card" data-testid="check-result" data-ok="${String(result.ok)}">
<h2>${result.ok ? c.t('check.ok', { n: int(c.lang, result.tenants_checked) }) : c.t('check.mismatch', { n: int(c.lang, result.mismatches.length), tenants: int(c.lang, result.tenants_checked) })}</h2>
${table(
  c,
  'mismatches',
  [c.t('check.tenant'), c.t('check.check'), c.t('check.expected'), c.t('check.actual'), c.t('check.detail')],
  result.mismatches.map(
    (m) =>
      html`<tr><td><a href="/tenants/${m.tenant}">${m.tenant}</a></td><td><code>${m.check}</code></td><td>${m.expected ?? ''}</td><td>${m.actual ?? ''}</td><td>${m.key_id ?? ''}${m.request_id ? `${m.request_id} ×${m.count}` : ''}</td></tr>`,
  ),
)}</section>`
    : ''
}`;
}

const auditJson = (v: unknown) => (v === null || v === undefined ? '' : JSON.stringify(v));

export function auditPage(c: ViewCtx, d: { rows: AuditRow[]; action: string | null; tenantId: string | null; page: number; hasMore: boolean }): SafeHtml {
  const q = new URLSearchParams();
  if (d.action) q.set('action', d.action);
  if (d.tenantId) q.set('tenant', d.tenantId);
  return html`<h1>${c.t('audit.title')}</h1>
<section class="card">
<form method="get" action="/audit" class="search">
<label>${c.t('audit.action')}<select name="action"><option value="">${c.t('audit.all_actions')}</option>${AUDIT_ACTIONS.map(
    (a) => html`<option value="${a}"${d.action === a ? raw(' selected') : ''}>${c.t(`action.${a}`)}</option>`,
  )}</select></label>
<label>${c.t('audit.tenant')}<input type="text" name="tenant" value="${d.tenantId ?? ''}" maxlength="100"></label>
<button type="submit">${c.t('audit.filter')}</button>
<a class="button" href="/audit.csv${q.size ? `?${q.toString()}` : ''}" data-testid="audit-csv">${c.t('common.csv')}</a>
</form>
${table(
  c,
  'audit',
  [
    c.t('audit.when'),
    c.t('audit.operator'),
    c.t('audit.action'),
    c.t('audit.address'),
    c.t('audit.subject'),
    c.t('common.reason'),
    c.t('audit.before'),
    c.t('audit.after'),
  ],
  d.rows.map(
    (r) => html`<tr data-testid="audit-row" data-action="${r.action}"><td>${dateTime(c.lang, r.at)}</td><td>${r.operator ?? (r.ip === 'cli' ? 'CLI' : '—')}</td>
<td>${c.t(`action.${r.action}`)}</td><td><code>${r.ip ?? ''}</code></td>
<td>${r.tenant_id ? html`<a href="/tenants/${r.tenant_id}">${r.tenant_id}</a>` : ''}${r.target ? html`<br><small><code>${r.target}</code></small>` : ''}</td>
<td>${r.reason ?? ''}</td><td><code class="json">${auditJson(r.before)}</code></td><td><code class="json">${auditJson(r.after)}</code></td></tr>`,
  ),
)}
${pager(c, q, '/audit', d.page, d.hasMore)}</section>`;
}

export function operatorsPage(c: ViewCtx, d: { operators: Operator[]; me: string }): SafeHtml {
  return html`<h1>${c.t('operators.title')}</h1>
<section class="card">${table(
    c,
    'operators',
    [c.t('operators.email'), c.t('operators.created'), c.t('operators.status'), ''],
    d.operators.map(
      (o) => html`<tr data-testid="operator-row"><td>${o.email}</td><td>${dateTime(c.lang, o.created_at)}</td>
<td>${o.disabled_at ? c.t('operators.disabled') : c.t('operators.active')}</td>
<td>${
        o.disabled_at || o.id === d.me
          ? ''
          : html`<form method="post" action="/operators/${o.id}/disable" class="inline">${csrfField(c)}<button type="submit" class="danger small">${c.t('operators.disable')}</button></form>`
      }</td></tr>`,
    ),
  )}</section>
<section class="card narrow"><h2>${c.t('operators.create')}</h2><p class="muted">${c.t('operators.create_text')}</p>
<form method="post" action="/operators">${csrfField(c)}
<label>${c.t('operators.email')}<input type="email" name="email" required maxlength="254"></label>
<button type="submit">${c.t('operators.create_button')}</button></form></section>`;
}

/** A new operator's one-time setup: password, TOTP (QR and otpauth URL), recovery codes. */
export function operatorSetupPage(c: ViewCtx, s: OperatorSetup, qrDataUrl: string): SafeHtml {
  return html`<h1>${c.t('setup.title', { email: s.operator.email })}</h1>
<section class="card created" data-testid="operator-setup"><p class="warning">⚠ ${c.t('setup.once')}</p>
<label>${c.t('setup.password')}<input type="text" readonly value="${s.password}" data-testid="setup-password" autocomplete="off" spellcheck="false"></label>
<h2>${c.t('setup.totp')}</h2><p>${c.t('setup.totp_text')}</p>
<img class="qr" alt="${c.t('setup.qr_alt')}" src="${qrDataUrl}" width="220" height="220">
<label>${c.t('setup.otpauth')}<textarea readonly rows="3" data-testid="setup-otpauth">${s.otpauthUrl}</textarea></label>
<h2>${c.t('setup.recovery')}</h2><p>${c.t('setup.recovery_text')}</p>
<pre class="codes" data-testid="setup-codes">${s.recoveryCodes.join('\n')}</pre>
<p><a href="/operators">${c.t('operators.title')}</a></p></section>`;
}
