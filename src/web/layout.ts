import { otherLangHref } from './http.ts';
import { html, raw, type SafeHtml } from './html.ts';
import type { Lang } from './i18n.ts';

// The page frame every web app draws (the portal's and the console's): the document, its head, the
// header (brand, the app's nav), the flash and error lines, the page; and the pieces both put in it.

export interface Frame {
  lang: Lang;
  /** The page's title, before " · " and the brand. */
  title: string;
  /** The header's link to / and the title's suffix. */
  brand: string;
  /** `<meta name="robots" content="noindex">`: pages no search engine should list. */
  noindex?: boolean;
  stylesheets: readonly string[];
  /** Scripts loaded deferred, after the stylesheets. */
  scripts?: readonly string[];
  bodyClass?: string;
  /** What the header holds after the brand: the app's nav and who is signed in. */
  header: SafeHtml;
  flash?: string | null;
  error?: string | null;
}

/** A whole page: the frame around `body`. */
export function frame(f: Frame, body: SafeHtml): string {
  return (
    '<!doctype html>' +
    html`<html lang="${f.lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
${f.noindex ? raw('<meta name="robots" content="noindex">\n') : ''}<title>${f.title} · ${f.brand}</title>
${f.stylesheets.map((href) => html`<link rel="stylesheet" href="${href}">\n`)}${(f.scripts ?? []).map((src) => html`<script src="${src}" defer></script>\n`)}</head>
<body${f.bodyClass ? html` class="${f.bodyClass}"` : ''}>
<header><a class="brand" href="/">${f.brand}</a>${f.header}</header>
<main>
${f.flash ? html`<p class="flash" role="status" data-testid="flash">${f.flash}</p>` : ''}
${f.error ? html`<p class="error" role="alert" data-testid="error">${f.error}</p>` : ''}
${body}
</main>
</body>
</html>`.value
  );
}

/** The link to the same page in the other language. */
export function langLink(c: { lang: Lang; path: string }, testid?: string): SafeHtml {
  const other: Lang = c.lang === 'en' ? 'pt-BR' : 'en';
  return html`<a class="lang"${testid ? html` data-testid="${testid}"` : ''} href="${otherLangHref(c.path, other)}">${other === 'en' ? 'English' : 'Português'}</a>`;
}

/** Previous / next links of a paged list: `path` with `base`'s query and `page` (its links' test ids when `testids`). */
export function pager(
  c: { t: (key: 'common.prev' | 'common.next') => string },
  base: URLSearchParams,
  path: string,
  page: number,
  hasMore: boolean,
  o: { testids?: boolean } = {},
): SafeHtml {
  const link = (p: number, testid: string) => {
    const q = new URLSearchParams(base);
    q.set('page', String(p));
    return html`<a href="${`${path}?${q.toString()}`}"${o.testids ? html` data-testid="${testid}"` : ''}>`;
  };
  return html`<p class="pager">${page > 1 ? html`${link(page - 1, 'prev')}${c.t('common.prev')}</a>` : ''} ${hasMore ? html`${link(page + 1, 'next')}${c.t('common.next')}</a>` : ''}</p>`;
}
