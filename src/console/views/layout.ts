import { html, raw, type SafeHtml } from '../../portal/html.ts';
import { otherLangHref } from '../../portal/http.ts';
import { csrfField } from '../../web/html.ts';
import type { Lang, T } from '../i18n/index.ts';

// The console's page frame, with the portal's stylesheet and templating (src/portal/html.ts:
// everything escaped unless raw) plus a few rules of its own (static/console.css).

export interface ViewCtx {
  t: T;
  lang: Lang;
  path: string;
  csrf: string;
  /** The signed-in operator's e-mail. */
  operator?: string;
}

export { csrfField };

export const NAV = [
  ['/tenants', 'nav.tenants'],
  ['/catalog', 'nav.catalog'],
  ['/money', 'nav.money'],
  ['/shortfalls', 'nav.shortfalls'],
  ['/pix', 'nav.pix'],
  ['/ledger-check', 'nav.ledger_check'],
  ['/audit', 'nav.audit'],
  ['/operators', 'nav.operators'],
] as const;

function langLink(c: ViewCtx): SafeHtml {
  const other: Lang = c.lang === 'en' ? 'pt-BR' : 'en';
  return html`<a class="lang" href="${otherLangHref(c.path, other)}">${other === 'en' ? 'English' : 'Português'}</a>`;
}

export function layout(c: ViewCtx, title: string, body: SafeHtml, o: { flash?: string | null; error?: string | null } = {}): string {
  const nav = c.operator
    ? html`<nav>${NAV.map(([href, key]) => html`<a href="${href}"${c.path.startsWith(href) ? raw(' aria-current="page"') : ''}>${c.t(key)}</a>`)}</nav>
<div class="who"><span class="email" data-testid="operator">${c.operator}</span>
<form method="post" action="/logout" class="inline">${csrfField(c)}<button type="submit" class="link">${c.t('nav.logout')}</button></form>${langLink(c)}</div>`
    : html`<nav></nav><div class="who">${langLink(c)}</div>`;
  return (
    '<!doctype html>' +
    html`<html lang="${c.lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>${title} · ${c.t('brand')}</title>
<link rel="stylesheet" href="/static/portal.css">
<link rel="stylesheet" href="/static/console.css">
</head>
<body class="console">
<header><a class="brand" href="/">${c.t('brand')}</a>${nav}</header>
<main>
${o.flash ? html`<p class="flash" role="status" data-testid="flash">${o.flash}</p>` : ''}
${o.error ? html`<p class="error" role="alert" data-testid="error">${o.error}</p>` : ''}
${body}
</main>
</body>
</html>`.value
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

export function pager(c: ViewCtx, base: URLSearchParams, path: string, page: number, hasMore: boolean): SafeHtml {
  const link = (p: number) => {
    const q = new URLSearchParams(base);
    q.set('page', String(p));
    return `${path}?${q.toString()}`;
  };
  return html`<p class="pager">${page > 1 ? html`<a href="${link(page - 1)}">${c.t('common.prev')}</a>` : ''} ${hasMore ? html`<a href="${link(page + 1)}">${c.t('common.next')}</a>` : ''}</p>`;
}
