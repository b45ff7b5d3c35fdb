import { dateTime, int, money } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import { pager } from '../../web/layout.ts';
import type { PortalBatch } from '../batches.ts';
import type { MessageKey } from '../i18n/index.ts';
import { allows, csrfField, type ViewCtx } from './layout.ts';

// "Lotes": the tenant's batches, newest first, their counts, spend and files; a batch still running
// may be cancelled (a confirmation page first, as a key's revocation).

type FileKind = 'input' | 'output' | 'errors' | 'results';

function files(c: ViewCtx, b: PortalBatch): SafeHtml {
  const link = (kind: FileKind) => html`<a href="/batches/${b.id}/${kind}" download data-testid="batch-${kind}">${c.t(`batches.file.${kind}`)}</a>`;
  const kinds: FileKind[] = [
    ...(b.input_file_id ? (['input'] as const) : []),
    ...(b.output_file_id ? (['output'] as const) : []),
    ...(b.error_file_id ? (['errors'] as const) : []),
    ...(b.results ? (['results'] as const) : []),
  ];
  return html`${kinds.map((k, i) => (i === 0 ? link(k) : html` · ${link(k)}`))}`;
}

const status = (c: ViewCtx, b: PortalBatch) => c.t(`batches.status.${b.status}` as MessageKey);

export function batchesPage(c: ViewCtx, rows: PortalBatch[], page: number, hasMore: boolean): SafeHtml {
  const mayDownload = allows(c, 'batches.results');
  const mayCancel = allows(c, 'batches.cancel');
  const columns = 8 + (mayDownload ? 1 : 0) + (mayCancel ? 1 : 0);
  return html`<h1>${c.t('batches.title')}</h1>
<p class="muted">${c.t('batches.intro')}</p>
<p class="muted"><small>${c.t('batches.results_note')}</small></p>
<section class="card">
<div class="scroll"><table class="batches" data-testid="batches"><thead><tr><th>${c.t('batches.col.id')}</th><th>${c.t('batches.col.api')}</th><th>${c.t('batches.col.status')}</th><th>${c.t('batches.col.created')}<br>${c.t('batches.col.ended')}</th><th class="num">${c.t('batches.col.total')}</th><th class="num">${c.t('batches.col.completed')}</th><th class="num">${c.t('batches.col.failed')}</th><th class="num">${c.t('batches.col.spend')}</th>${mayDownload ? html`<th>${c.t('batches.col.files')}</th>` : ''}${mayCancel ? html`<th>${c.t('batches.col.actions')}</th>` : ''}</tr></thead><tbody>
${rows.length === 0 ? html`<tr><td colspan="${columns}" class="muted" data-testid="batches-none">${c.t('common.none')}</td></tr>` : ''}
${rows.map(
  (
    b,
  ) => html`<tr data-testid="batch-row" data-id="${b.id}"><td><code>${b.id}</code></td><td>${c.t(`batches.api.${b.api}`)}<br><small><code>${b.endpoint}</code></small></td>
<td><span class="badge" data-testid="batch-status">${status(c, b)}</span></td><td>${dateTime(c.lang, b.created_at)}${b.ended_at ? html`<br>${dateTime(c.lang, b.ended_at)}` : ''}</td>
<td class="num">${int(c.lang, b.total)}</td><td class="num">${int(c.lang, b.completed)}</td><td class="num">${int(c.lang, b.failed)}</td>
<td class="num" data-testid="batch-spend">${money(c.lang, b.spend_micros)}</td>${mayDownload ? html`<td>${files(c, b)}</td>` : ''}${
    mayCancel
      ? html`<td>${b.cancellable ? html`<a class="button danger small" href="/batches/${b.id}/cancel" data-testid="batch-cancel">${c.t('batches.cancel')}</a>` : ''}</td>`
      : ''
  }</tr>`,
)}
</tbody></table></div>
${pager(c, new URLSearchParams(), '/batches', page, hasMore, { testids: true })}
</section>`;
}

/** "Cancelar o lote …?": what a cancel does, and the form that does it. */
export function cancelConfirmPage(c: ViewCtx, b: PortalBatch): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('batches.cancel_title', { id: b.id })}</h1>
<p>${c.t(`batches.api.${b.api}`)} · <code>${b.endpoint}</code> · <span class="badge">${status(c, b)}</span></p>
<p>${c.t('batches.col.total')}: ${int(c.lang, b.total)} · ${c.t('batches.col.completed')}: ${int(c.lang, b.completed)} · ${c.t('batches.col.failed')}: ${int(c.lang, b.failed)}</p>
<p>${c.t('batches.cancel_text')}</p>
<form method="post" action="/batches/${b.id}/cancel">
${csrfField(c)}
<button type="submit" class="danger" data-testid="confirm-cancel">${c.t('batches.cancel_confirm')}</button>
<a href="/batches">${c.t('batches.cancel_back')}</a>
</form>
</section>`;
}
