import { randomBytes } from 'node:crypto';
import type { ErrorHandler, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getCookie } from 'hono/cookie';
import type pg from 'pg';
import { classifyDbError } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { tokensEqual } from '../portal/auth.ts';
import { MAX_FORM_BYTES, one, parseForm, requestUrl, send, TEXT } from '../portal/http.ts';
import { originAllowed } from '../portal/middleware.ts';
import { clientOf, reachedOverHttps, type TrustFn } from '../portal/proxy.ts';
import { getOperator, operatorSessions } from './auth.ts';
import { type ConsoleEnv, LANG_COOKIE, PRE_CSRF_COOKIE, SESSION_COOKIE, setConsoleCookie } from './http.ts';
import { type Lang, parseLang, translator } from './i18n/index.ts';
import type { ConsoleRenderer } from './render.ts';
import { messagePage } from './views/layout.ts';

// The console's middleware, in the order createConsoleApp (app.ts) runs it. The checks are the
// portal's (its form parser, Origin check and constant-time token comparison); the session is an
// operator's, in operator_sessions.

const log = createLogger('console');

export interface RequestContextOptions {
  trust: TrustFn;
  /** CONSOLE_PUBLIC_URL is https: operators reach the console over TLS, whatever the hop before us. */
  publicHttps: boolean;
}

/** Every request: its URL, language (`?lang=` kept in a cookie), client address, whether cookies get `Secure`. */
export function requestContext(o: RequestContextOptions): MiddlewareHandler<ConsoleEnv> {
  return async (c, next) => {
    const incoming = c.env.incoming;
    const url = requestUrl(incoming.url);
    if (!url) return send(c, 400, TEXT, 'Bad Request');
    const { ip, viaProxy } = clientOf(incoming, o.trust);
    const queryLang = parseLang(url.searchParams.get('lang'));
    const lang: Lang = queryLang ?? parseLang(getCookie(c, LANG_COOKIE)) ?? 'pt-BR';
    c.set('url', url);
    c.set('lang', lang);
    c.set('t', translator(lang));
    c.set('secure', reachedOverHttps(incoming, viaProxy, o.publicHttps));
    c.set('ip', ip);
    c.set('operator', null);
    c.set('preCsrf', getCookie(c, PRE_CSRF_COOKIE) ?? '');
    if (queryLang) setConsoleCookie(c, LANG_COOKIE, queryLang, 365 * 86400);
    await next();
  };
}

/** The operator of the session cookie (a disabled operator has none); without one, a double-submit CSRF token for the sign-in form. */
export function operatorLoader(db: pg.Pool): MiddlewareHandler<ConsoleEnv> {
  return async (c, next) => {
    if (c.var.url.pathname.startsWith('/static/') || c.var.url.pathname === '/healthz') return next();
    const s = await operatorSessions.load(db, getCookie(c, SESSION_COOKIE));
    const operator = s ? await getOperator(db, s.subjectId) : null;
    if (s && operator && !operator.disabled_at) c.set('operator', { operator, csrf: s.csrf, idHash: s.idHash });
    if (!c.var.operator && !/^[A-Za-z0-9_-]{43}$/.test(c.var.preCsrf)) {
      const token = c.req.method === 'GET' ? randomBytes(32).toString('base64url') : '';
      c.set('preCsrf', token);
      if (token) setConsoleCookie(c, PRE_CSRF_COOKIE, token, 3600);
    }
    await next();
  };
}

/** Without an operator's session, every route but the sign-in page sends the browser there (nothing runs). */
export const requireOperator: MiddlewareHandler<ConsoleEnv> = async (c, next) => (c.var.operator ? next() : send(c, 303, TEXT, '', { location: '/login' }));

/**
 * Every POST form: at most MAX_FORM_BYTES (413), no NUL or control characters (400 naming the
 * field), and CSRF (403): the Origin check and the synchronizer token (the session's secret;
 * before sign-in, the double-submit cookie).
 */
export function formPost(r: ConsoleRenderer): [MiddlewareHandler<ConsoleEnv>, MiddlewareHandler<ConsoleEnv>] {
  const readForm: MiddlewareHandler<ConsoleEnv> = async (c, next) => {
    const { t, operator } = c.var;
    const parsed = parseForm(Buffer.from(await c.req.arrayBuffer()));
    if ('badField' in parsed) return r.page(c, 400, t('error.bad_form'), (vc) => messagePage(vc, '400', t('error.bad_field', { field: parsed.badField })));
    const originOk = await originAllowed(c);
    const expected = operator ? operator.csrf : getCookie(c, PRE_CSRF_COOKIE);
    if (!originOk || !tokensEqual(one(parsed.form, '_csrf'), expected)) {
      log.warn('console csrf check failed', { path: c.var.url.pathname, has_session: !!operator, origin_ok: originOk });
      return r.page(c, 403, 'CSRF', (vc) => messagePage(vc, '403', t('error.csrf')));
    }
    c.set('form', parsed.form);
    await next();
  };
  return [bodyLimit({ maxSize: MAX_FORM_BYTES, onError: (c) => send(c, 413, TEXT, 'Payload Too Large') }), readForm];
}

/** PostgreSQL away or too slow: 503; anything else 500. */
export const onError: ErrorHandler<ConsoleEnv> = (err, c) => {
  const t = c.var.t ?? translator('pt-BR');
  if (classifyDbError(err)) {
    log.warn('console request refused: database unavailable', { method: c.req.method, path: c.req.path, code: (err as { code?: string }).code });
    return send(c, 503, TEXT, t('error.unavailable'), { 'retry-after': '5' });
  }
  log.error('console request failed', { err, method: c.req.method, path: c.req.path });
  return send(c, 500, TEXT, t('error.internal'));
};
