import type { DbClient } from '../db/pool.ts';
import { fxStatus } from '../fx/service.ts';
import { html, type SafeHtml } from '../web/html.ts';
import { send } from '../web/http.ts';
import type { CCtx } from './http.ts';
import { layout, messagePage, type ViewCtx } from './views/layout.ts';

// Pages in the console's frame (views/layout.ts); never cached (`no-store`, as every answer of send()).

export type PageOptions = { flash?: string | null; error?: string | null };

export interface ConsoleRenderer {
  page(c: CCtx, status: number, title: string, body: (vc: ViewCtx) => SafeHtml, o?: PageOptions): Promise<Response>;
  notFound(c: CCtx): Promise<Response>;
}

export function viewCtx(c: CCtx): ViewCtx {
  const { t, lang, url, operator } = c.var;
  return { t, lang, path: url.pathname + url.search, csrf: operator?.csrf ?? c.var.preCsrf, operator: operator?.operator.email };
}

/** The banner over every signed-in page while the PTAX cannot be fetched (prices keep the last rate). */
async function ptaxBanner(db: DbClient, vc: ViewCtx): Promise<SafeHtml | null> {
  const s = await fxStatus(db).catch(() => null);
  if (!s?.failingSince) return null;
  const since = new Intl.DateTimeFormat(vc.lang, { timeZone: 'America/Sao_Paulo', dateStyle: 'short', timeStyle: 'short' }).format(s.failingSince);
  return html`<p class="error" role="alert" data-testid="ptax-banner">${vc.t('fx.failing', { since })}</p>`;
}

export function renderer(db?: DbClient): ConsoleRenderer {
  const page = async (c: CCtx, status: number, title: string, body: (vc: ViewCtx) => SafeHtml, o: PageOptions = {}) => {
    const vc = viewCtx(c);
    const banner = db && vc.operator ? await ptaxBanner(db, vc) : null;
    return send(c, status, 'text/html; charset=utf-8', layout(vc, title, banner ? html`${banner}${body(vc)}` : body(vc), o));
  };
  const notFound = (c: CCtx) => page(c, 404, c.var.t('error.not_found'), (vc) => messagePage(vc, '404', c.var.t('error.not_found')));
  return { page, notFound };
}
