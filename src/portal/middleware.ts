import type { ErrorHandler, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import type pg from 'pg';
import { createLogger } from '../log.ts';
import { ensurePreCsrf, originAllowed, webErrorHandler, webFormPost, webRequestContext } from '../web/middleware.ts';
import { loadSession } from './auth.ts';
import { reachedOverHttps, type TrustFn } from '../web/proxy.ts';
import { translator } from './i18n/index.ts';
import { type AppEnv, LANG_COOKIE, PRE_CSRF_COOKIE, SESSION_COOKIE, setPortalCookie } from './http.ts';
import { type Renderer, unauthenticated } from './render.ts';
import * as V from './views/layout.ts';

// The portal's middleware, in the order createPortalApp (app.ts) runs it: the unread body dropped,
// the methods allowed, the request context, the pre-sign-in CSRF token, the form checks and the
// error handler are src/web/middleware.ts's, shared with the operator's console; the session is the
// portal's own.

const log = createLogger('portal');

export interface RequestContextOptions {
  /** Who may forward client addresses (PORTAL_TRUSTED_PROXIES, compiled). */
  trust: TrustFn;
  secureMode: 'auto' | boolean;
  /** PORTAL_PUBLIC_URL is https: users reach the portal over TLS, whatever the hop before us. */
  publicHttps: boolean;
}

/** Every request: its URL, language (`?lang=` is kept in a cookie), client address, and whether cookies get `Secure` (src/web/middleware.ts). */
export function requestContext(o: RequestContextOptions): MiddlewareHandler<AppEnv> {
  return webRequestContext<AppEnv>({
    trust: o.trust,
    secure: (incoming, viaProxy) => (o.secureMode === 'auto' ? reachedOverHttps(incoming, viaProxy, o.publicHttps) : o.secureMode),
    translator,
    langCookie: LANG_COOKIE,
    preCsrfCookie: PRE_CSRF_COOKIE,
    setCookie: setPortalCookie,
    init: (c) => c.set('session', null),
  });
}

/**
 * The session of the browser's cookie; without one, a double-submit CSRF token for the sign-in and
 * sign-up forms. Not for /static/ and /webhooks/ paths: a file or a PSP has no session.
 */
export function sessionLoader(db: pg.Pool): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const path = c.var.url.pathname;
    if (path.startsWith('/webhooks/') || path.startsWith('/static/')) return next();
    const session = await loadSession(db, getCookie(c, SESSION_COOKIE));
    c.set('session', session);
    if (!session) ensurePreCsrf(c, { cookie: PRE_CSRF_COOKIE, maxAgeS: 86400, setCookie: setPortalCookie });
    await next();
  };
}

export const requireSession: MiddlewareHandler<AppEnv> = async (c, next) => (c.var.session ? next() : unauthenticated(c));

/** The form's Origin check of every POST (src/web/middleware.ts). */
export { originAllowed };

/**
 * Every POST form: at most MAX_FORM_BYTES (413), no NUL or control characters (400, naming the field), and CSRF (403): the same-origin check
 * and the synchronizer token (the session's secret; before sign-in, the double-submit cookie). See src/web/middleware.ts.
 */
export function formPost(r: Renderer): [MiddlewareHandler<AppEnv>, MiddlewareHandler<AppEnv>] {
  return webFormPost<AppEnv>({
    expectedToken: (c) => (c.var.session ? c.var.session.csrf : getCookie(c, PRE_CSRF_COOKIE)),
    hasSession: (c) => !!c.var.session,
    badField: (c, field) => r.page(c, 400, c.var.t('error.bad_form_title'), (vc) => V.messagePage(vc, '400', c.var.t('error.bad_field', { field }))),
    csrfFailed: (c) => r.page(c, 403, 'CSRF', (vc) => V.messagePage(vc, '403', c.var.t('error.csrf'))),
    log,
    logMessage: 'csrf check failed',
  });
}

/** PostgreSQL away or too slow: a 503 to come back later (a PSP delivers its webhook again); anything else a 500. */
export const onError: ErrorHandler<AppEnv> = webErrorHandler<AppEnv>({
  log,
  app: 'portal',
  fallback: (key) => translator('pt-BR')(key),
  logPath: (path) => (path.startsWith('/webhooks/') ? '/webhooks/pix/…' : path),
});
