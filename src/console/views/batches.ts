import { amount, dateTime, int } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import { BATCH_STATUSES, type ConsoleBatch } from '../batches.ts';
import type { ConsoleKey } from '../i18n/index.ts';
import { pager, table, type ViewCtx } from './layout.ts';

export function batchesPage(c: ViewCtx, d: { status: string; tenantId: string; rows: ConsoleBatch[]; page: number; hasMore: boolean }): SafeHtml {
  const query = new URLSearchParams({ ...(d.status ? { status: d.status } : {}), ...(d.tenantId ? { tenant: d.tenantId } : {}) });
  return html`<h1>${c.t('batches.title')}</h1>
<section class="card">
<form method="get" action="/batches" class="search">
<label>${c.t('batches.status')}<select name="status"><option value="">${c.t('batches.any_status')}</option>${BATCH_STATUSES.map(
    (s) => html`<option value="${s}"${s === d.status ? html` selected` : ''}>${s}</option>`,
  )}</select></label>
<label>${c.t('money.tenant')}<input type="text" name="tenant" value="${d.tenantId}" maxlength="100"></label>
<button type="submit">${c.t('money.show')}</button>
</form>
<p class="muted"><small>${c.t('batches.note')}</small></p>
${table(
  c,
  'batches',
  [
    c.t('batches.id'),
    c.t('money.tenant'),
    c.t('batches.api'),
    c.t('batches.status'),
    c.t('batches.created'),
    { text: c.t('batches.lines'), num: true },
    { text: c.t('batches.completed'), num: true },
    { text: c.t('batches.failed'), num: true },
    { text: c.t('batches.debited'), num: true },
    { text: c.t('batches.spend'), num: true },
  ],
  d.rows.map(
    (b) => html`<tr data-testid="batch-row" data-id="${b.id}"><td><code>${b.id}</code></td><td><a href="/tenants/${b.tenant_id}">${b.tenant_name}</a></td>
<td>${b.api === 'anthropic' ? 'Anthropic' : 'OpenAI'}<br><small><code>${b.endpoint}</code></small></td><td><span class="badge">${c.t(`batches.s.${b.status}` as ConsoleKey)}</span></td>
<td>${dateTime(c.lang, b.created_at)}</td><td class="num">${int(c.lang, b.total)}</td><td class="num">${int(c.lang, b.completed)}</td><td class="num">${int(c.lang, b.failed)}</td>
<td class="num">${int(c.lang, b.debited_lines)}</td><td class="num" data-testid="batch-spend">${amount(c.lang, b.spend_micros)}</td></tr>`,
  ),
)}
${pager(c, query, '/batches', d.page, d.hasMore)}
</section>`;
}
