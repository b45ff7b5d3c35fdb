import { amount, dateTime } from '../../web/format.ts';
import { html, type SafeHtml } from '../../web/html.ts';
import type { ConsoleCharge, PixState } from '../pix.ts';
import { table, type ViewCtx } from './layout.ts';

const STATE_CLASS: Record<PixState, string> = {
  created: 'ATIVA',
  paid: 'ATIVA',
  credited: 'CONCLUIDA',
  refunded: 'EXPIRADA',
  expired: 'EXPIRADA',
  removed: 'EXPIRADA',
};
export const chargeStateBadge = (c: ViewCtx, s: PixState) => html`<span class="badge s-${STATE_CLASS[s]}">${c.t(`state.${s}`)}</span>`;

export function chargesTable(c: ViewCtx, charges: ConsoleCharge[], withTenant: boolean): SafeHtml {
  return table(
    c,
    'charges',
    [
      c.t('pix.created'),
      ...(withTenant ? [c.t('pix.tenant')] : []),
      { text: c.t('pix.amount'), num: true },
      c.t('pix.state'),
      c.t('pix.psp_status'),
      { text: c.t('pix.credited'), num: true },
      { text: c.t('pix.refunded'), num: true },
      'txid',
    ],
    charges.map(
      (ch) => html`<tr data-testid="charge-row" data-state="${ch.state}"><td>${dateTime(c.lang, ch.created_at)}</td>
${withTenant ? html`<td><a href="/tenants/${ch.tenant_id}">${ch.tenant_name}</a></td>` : ''}
<td class="num">${amount(c.lang, ch.amount_micros)}</td><td>${chargeStateBadge(c, ch.state)}</td><td><code>${ch.status}</code></td>
<td class="num">${amount(c.lang, ch.credited_micros)}</td><td class="num">${amount(c.lang, ch.refunded_micros)}</td><td><code>${ch.txid}</code></td></tr>`,
    ),
  );
}
