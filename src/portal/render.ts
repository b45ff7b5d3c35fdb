import type pg from 'pg';
import { getTenant } from '../db/tenants.ts';
import type { SafeHtml } from '../web/html.ts';
import type { Ctx } from './http.ts';
import { json, redirect, send } from '../web/http.ts';
import * as V from './views/layout.ts';

// Pages in the portal's layout (views/layout.ts), and the answers shared by every area: 404, and what a
// request that needs a session gets without one.

export type PageOptions = { flash?: string | null; error?: string | null };

export interface Renderer {
  page(c: Ctx, status: number, title: string, body: (vc: V.ViewCtx) => SafeHtml, o?: PageOptions): Promise<Response>;
  notFound(c: Ctx): Promise<Response>;
}

export function renderer(db: pg.Pool): Renderer {
  async function viewCtx(c: Ctx): Promise<V.ViewCtx> {
    const { t, lang, url, session } = c.var;
    const vc: V.ViewCtx = { t, lang, path: url.pathname + url.search, csrf: session?.csrf ?? c.var.preCsrf };
    if (session) {
      vc.email = session.user.email;
      vc.role = session.user.role;
      vc.balance = (await getTenant(db, session.user.tenant_id))?.balance_micros ?? 0n;
    }
    return vc;
  }
  async function page(c: Ctx, status: number, title: string, body: (vc: V.ViewCtx) => SafeHtml, o: PageOptions = {}) {
    const vc = await viewCtx(c);
    return send(c, status, 'text/html; charset=utf-8', V.layout(vc, title, body(vc), o));
  }
  const notFound = (c: Ctx) => page(c, 404, c.var.t('error.not_found'), (vc) => V.messagePage(vc, '404', c.var.t('error.not_found')));
  return { page, notFound };
}

/** What a page that needs a session answers without one: the status poll a 401, anything else the sign-in page. */
export const unauthenticated = (c: Ctx) => (c.var.url.pathname.endsWith('/status') ? json(c, 401, { error: 'unauthorized' }) : redirect(c, '/login'));
