import { dateTime, int, money } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import { pager } from '../../web/layout.ts';
import type { PortalBatch } from '../batches.ts';
import type { MessageKey } from '../i18n/index.ts';
import { allows, type ViewCtx } from './layout.ts';

// "Lotes": the tenant's batches, newest first, their counts, spend and result files.

function files(c: ViewCtx, b: PortalBatch): SafeHtml {
  const link = (kind: 'output' | 'errors' | 'results') =>
    html`<a href="/batches/${b.id}/${kind}" download data-testid="batch-${kind}">${c.t(`batches.file.${kind}`)}</a>`;
  const links = [b.output_file_id ? link('output') : null, b.error_file_id ? link('errors') : null, b.results ? link('results') : null].filter(
    (x) => x !== null,
  );
  return html`${links.map((l, i) => (i === 0 ? l : html` · ${l}`))}`;
}

export function batchesPage(c: ViewCtx, rows: PortalBatch[], page: number, hasMore: boolean): SafeHtml {
  const mayDownload = allows(c, 'batches.results');
  return html`<h1>${c.t('batches.title')}</h1>
<p class="muted">${c.t('batches.intro')}</p>
<p class="muted"><small>${c.t('batches.results_note')}</small></p>
<section class="card">
<div class="scroll"><table class="batches" data-testid="batches"><thead><tr><th>${c.t('batches.col.id')}</th><th>${c.t('batches.col.api')}</th><th>${c.t('batches.col.status')}</th><th>${c.t('batches.col.created')}<br>${c.t('batches.col.ended')}</th><th class="num">${c.t('batches.col.total')}</th><th class="num">${c.t('batches.col.completed')}</th><th class="num">${c.t('batches.col.failed')}</th><th class="num">${c.t('batches.col.spend')}</th>${mayDownload ? html`<th>${c.t('batches.col.files')}</th>` : ''}</tr></thead><tbody>
${rows.length === 0 ? html`<tr><td colspan="${mayDownload ? 9 : 8}" class="muted" data-testid="batches-none">${c.t('common.none')}</td></tr>` : ''}
${rows.map(
  (
    b,
  ) => html`<tr data-testid="batch-row" data-id="${b.id}"><td><code>${b.id}</code></td><td>${c.t(`batches.api.${b.api}`)}<br><small><code>${b.endpoint}</code></small></td>
<td><span class="badge" data-testid="batch-status">${c.t(`batches.status.${b.status}` as MessageKey)}</span></td><td>${dateTime(c.lang, b.created_at)}${b.ended_at ? html`<br>${dateTime(c.lang, b.ended_at)}` : ''}</td>
<td class="num">${int(c.lang, b.total)}</td><td class="num">${int(c.lang, b.completed)}</td><td class="num">${int(c.lang, b.failed)}</td>
<td class="num" data-testid="batch-spend">${money(c.lang, b.spend_micros)}</td>${mayDownload ? html`<td>${files(c, b)}</td>` : ''}</tr>`,
)}
</tbody></table></div>
${pager(c, new URLSearchParams(), '/batches', page, hasMore, { testids: true })}
</section>`;
}
