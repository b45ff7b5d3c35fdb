import { html, raw, type SafeHtml } from '../../web/html.ts';
import { csrfField } from '../../web/html.ts';
import { frame, langLink, pager } from '../../web/layout.ts';
import type { Lang, T } from '../i18n/index.ts';

// The console's page frame (src/web/layout.ts), with the portal's stylesheet and templating
// (src/web/html.ts: everything escaped unless raw) plus a few rules of its own (static/console.css).

export interface ViewCtx {
  t: T;
  lang: Lang;
  path: string;
  csrf: string;
  /** The signed-in operator's e-mail. */
  operator?: string;
}

export { csrfField, pager };

export const NAV = [
  ['/tenants', 'nav.tenants'],
  ['/catalog', 'nav.catalog'],
  ['/money', 'nav.money'],
  ['/fx', 'nav.fx'],
  ['/batches', 'nav.batches'],
  ['/shortfalls', 'nav.shortfalls'],
  ['/pix', 'nav.pix'],
  ['/nfse', 'nav.nfse'],
  ['/ledger-check', 'nav.ledger_check'],
  ['/audit', 'nav.audit'],
  ['/operators', 'nav.operators'],
] as const;

export function layout(c: ViewCtx, title: string, body: SafeHtml, o: { flash?: string | null; error?: string | null } = {}): string {
  const header = c.operator
    ? html`<nav>${NAV.map(([href, key]) => html`<a href="${href}"${c.path.startsWith(href) ? raw(' aria-current="page"') : ''}>${c.t(key)}</a>`)}</nav>
<div class="who"><span class="email" data-testid="operator">${c.operator}</span>
<form method="post" action="/logout" class="inline">${csrfField(c)}<button type="submit" class="link">${c.t('nav.logout')}</button></form>${langLink(c)}</div>`
    : html`<nav></nav><div class="who">${langLink(c)}</div>`;
  return frame(
    {
      lang: c.lang,
      title,
      brand: c.t('brand'),
      noindex: true,
      stylesheets: ['/static/portal.css', '/static/console.css'],
      bodyClass: 'console',
      header,
      ...o,
    },
    body,
  );
}

export function messagePage(c: ViewCtx, title: string, text: string): SafeHtml {
  return html`<section class="card narrow"><h1>${title}</h1><p data-testid="message">${text}</p><p><a href="/">${c.t('brand')}</a></p></section>`;
}

export function loginPage(c: ViewCtx, v: { email?: string } = {}): SafeHtml {
  return html`<section class="card narrow">
<h1>${c.t('login.title')}</h1>
<p class="muted">${c.t('login.intro')}</p>
<form method="post" action="/login">
${csrfField(c)}
<label>${c.t('login.email')}<input type="email" name="email" autocomplete="username" required value="${v.email ?? ''}"></label>
<label>${c.t('login.password')}<input type="password" name="password" autocomplete="current-password" required></label>
<label>${c.t('login.code')}<input type="text" name="code" inputmode="numeric" autocomplete="one-time-code" required maxlength="20"><small>${c.t('login.code_hint')}</small></label>
<button type="submit">${c.t('login.button')}</button>
</form>
</section>`;
}

/** A table, or a line saying there is nothing. */
export function table(c: ViewCtx, testid: string, head: Array<string | { text: string; num: true }>, rows: SafeHtml[]): SafeHtml {
  if (rows.length === 0) return html`<p class="muted" data-testid="${testid}-empty">${c.t('common.none')}</p>`;
  return html`<div class="scroll"><table data-testid="${testid}"><thead><tr>${head.map((h) =>
    typeof h === 'string' ? html`<th>${h}</th>` : html`<th class="num">${h.text}</th>`,
  )}</tr></thead><tbody>${rows}</tbody></table></div>`;
}
