import { frame, langLink } from '../../web/layout.ts';
import { csrfField, html, type SafeHtml } from '../../web/html.ts';
import type { Lang, T } from '../i18n/index.ts';
import { money } from '../../web/format.ts';
import type { Role } from '../../db/members.ts';
import { may } from '../roles.ts';

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
        <a href="/batches">${c.t('nav.batches')}</a>
        ${allows(c, 'members') ? html`<a href="/members">${c.t('nav.members')}</a>` : ''}
        <a href="/account">${c.t('nav.account')}</a>
        ${allows(c, 'notifications') ? html`<a href="/notifications">${c.t('nav.notifications')}</a>` : ''}
        ${allows(c, 'invoices') ? html`<a href="/notas-fiscais">${c.t('nav.invoices')}</a><a href="/dados-fiscais">${c.t('nav.fiscal')}</a>` : ''}
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

export function messagePage(c: ViewCtx, title: string, text: string, link: { href: string; label: string } = { href: '/', label: 'catraca' }): SafeHtml {
  return html`<section class="card narrow"><h1>${title}</h1><p data-testid="message">${text}</p><p><a href="${link.href}">${link.label}</a></p></section>`;
}
