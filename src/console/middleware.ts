import type { ErrorHandler, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import type pg from 'pg';
import { createLogger } from '../log.ts';
import { send, TEXT } from '../web/http.ts';
import { reachedOverHttps, type TrustFn } from '../web/proxy.ts';
import { ensurePreCsrf, webErrorHandler, webFormPost, webRequestContext } from '../web/middleware.ts';
import { getOperator, operatorSessions } from './auth.ts';
import { type ConsoleEnv, LANG_COOKIE, PRE_CSRF_COOKIE, SESSION_COOKIE, setConsoleCookie } from './http.ts';
import { translator } from './i18n/index.ts';
import type { ConsoleRenderer } from './render.ts';
import { messagePage } from './views/layout.ts';

// The console's middleware, in the order createConsoleApp (app.ts) runs it. The request context,
// the pre-sign-in CSRF token, the form checks and the error handler are the portal's, shared in
// src/web/middleware.ts; the session is an operator's, in operator_sessions.

const log = createLogger('console');

export interface RequestContextOptions {
  trust: TrustFn;
  /** CONSOLE_PUBLIC_URL is https: operators reach the console over TLS, whatever the hop before us. */
  publicHttps: boolean;
}

/** Every request: its URL, language (`?lang=` kept in a cookie), client address, whether cookies get `Secure` (src/web/middleware.ts). */
export function requestContext(o: RequestContextOptions): MiddlewareHandler<ConsoleEnv> {
  return webRequestContext<ConsoleEnv>({
    trust: o.trust,
    secure: (incoming, viaProxy) => reachedOverHttps(incoming, viaProxy, o.publicHttps),
    translator,
    langCookie: LANG_COOKIE,
    preCsrfCookie: PRE_CSRF_COOKIE,
    setCookie: setConsoleCookie,
    init: (c) => c.set('operator', null),
  });
}

/** The operator of the session cookie (a disabled operator has none); without one, a double-submit CSRF token for the sign-in form. */
export function operatorLoader(db: pg.Pool): MiddlewareHandler<ConsoleEnv> {
  return async (c, next) => {
    if (c.var.url.pathname.startsWith('/static/') || c.var.url.pathname === '/healthz') return next();
    const s = await operatorSessions.load(db, getCookie(c, SESSION_COOKIE));
    const operator = s ? await getOperator(db, s.subjectId) : null;
    if (s && operator && !operator.disabled_at) c.set('operator', { operator, csrf: s.csrf, idHash: s.idHash });
    if (!c.var.operator) ensurePreCsrf(c, { cookie: PRE_CSRF_COOKIE, maxAgeS: 3600, setCookie: setConsoleCookie });
    await next();
  };
}

/** Without an operator's session, every route but the sign-in page sends the browser there (nothing runs). */
export const requireOperator: MiddlewareHandler<ConsoleEnv> = async (c, next) => (c.var.operator ? next() : send(c, 303, TEXT, '', { location: '/login' }));

/**
 * Every POST form: at most MAX_FORM_BYTES (413), no NUL or control characters (400 naming the
 * field), and CSRF (403): the Origin check and the synchronizer token (the session's secret;
 * before sign-in, the double-submit cookie). See src/web/middleware.ts.
 */
export function formPost(r: ConsoleRenderer): [MiddlewareHandler<ConsoleEnv>, MiddlewareHandler<ConsoleEnv>] {
  return webFormPost<ConsoleEnv>({
    expectedToken: (c) => (c.var.operator ? c.var.operator.csrf : getCookie(c, PRE_CSRF_COOKIE)),
    hasSession: (c) => !!c.var.operator,
    badField: (c, field) => r.page(c, 400, c.var.t('error.bad_form'), (vc) => messagePage(vc, '400', c.var.t('error.bad_field', { field }))),
    csrfFailed: (c) => r.page(c, 403, 'CSRF', (vc) => messagePage(vc, '403', c.var.t('error.csrf'))),
    log,
    logMessage: 'console csrf check failed',
  });
}

/** PostgreSQL away or too slow: 503; anything else 500. */
export const onError: ErrorHandler<ConsoleEnv> = webErrorHandler<ConsoleEnv>({ log, app: 'console', fallback: (key) => translator('pt-BR')(key) });
