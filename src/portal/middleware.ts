import { randomBytes } from 'node:crypto';
import type { Context, ErrorHandler, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getCookie } from 'hono/cookie';
import { csrf } from 'hono/csrf';
import { HTTPException } from 'hono/http-exception';
import type pg from 'pg';
import { classifyDbError } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { loadSession, tokensEqual } from './auth.ts';
import { clientOf, reachedOverHttps, type TrustFn } from './proxy.ts';
import { parseLang, translator, type Lang } from './i18n/index.ts';
import { type AppEnv, LANG_COOKIE, MAX_FORM_BYTES, one, parseForm, PRE_CSRF_COOKIE, requestUrl, send, SESSION_COOKIE, setPortalCookie, TEXT } from './http.ts';
import { type Renderer, unauthenticated } from './render.ts';
import * as V from './views.ts';

// The portal's own middleware, in the order createPortalApp (app.ts) runs it.

const log = createLogger('portal');

/**
 * A request body nobody read (a 413 decided on its Content-Length, a 405, a POST to /healthz) is read
 * and dropped before the answer goes out, as the portal always did: answered with the body still on
 * the wire, @hono/node-server's clean-up can close the connection under a keep-alive client that
 * already sent its next request on it ("other side closed"). The server's requestTimeout bounds it.
 */
export const dropUnreadBody: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  const incoming = c.env.incoming;
  if (c.req.method === 'GET' || c.req.method === 'HEAD' || incoming.readableDidRead || incoming.readableEnded) return;
  try {
    for await (const _ of incoming);
  } catch {
    // the client went away: there is nobody to answer
  }
};

export interface RequestContextOptions {
  /** Who may forward client addresses (PORTAL_TRUSTED_PROXIES, compiled). */
  trust: TrustFn;
  secureMode: 'auto' | boolean;
  /** PORTAL_PUBLIC_URL is https: users reach the portal over TLS, whatever the hop before us. */
  publicHttps: boolean;
}

/** Every request: its URL, language (`?lang=` is kept in a cookie), client address, and whether cookies get `Secure`. */
export function requestContext(o: RequestContextOptions): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const incoming = c.env.incoming;
    const url = requestUrl(incoming.url);
    if (!url) return send(c, 400, TEXT, 'Bad Request');
    // X-Forwarded-* only from a trusted proxy: anyone reaching the portal directly forges them.
    const { ip, viaProxy } = clientOf(incoming, o.trust);
    const secure = o.secureMode === 'auto' ? reachedOverHttps(incoming, viaProxy, o.publicHttps) : o.secureMode;
    const queryLang = parseLang(url.searchParams.get('lang'));
    const lang: Lang = queryLang ?? parseLang(getCookie(c, LANG_COOKIE)) ?? 'pt-BR';
    c.set('url', url);
    c.set('lang', lang);
    c.set('t', translator(lang));
    c.set('secure', secure);
    c.set('ip', ip);
    c.set('session', null);
    c.set('preCsrf', getCookie(c, PRE_CSRF_COOKIE) ?? '');
    if (queryLang) setPortalCookie(c, LANG_COOKIE, queryLang, 365 * 86400);
    await next();
  };
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
    if (!session && !/^[A-Za-z0-9_-]{43}$/.test(c.var.preCsrf)) {
      const token = c.req.method === 'GET' ? randomBytes(32).toString('base64url') : '';
      c.set('preCsrf', token);
      if (token) setPortalCookie(c, PRE_CSRF_COOKIE, token, 86400);
    }
    await next();
  };
}

export const allowedMethods: MiddlewareHandler<AppEnv> = async (c, next) =>
  ['GET', 'HEAD', 'POST'].includes(c.req.method) ? next() : send(c, 405, TEXT, 'Method Not Allowed', { allow: 'GET, POST' });

export const requireSession: MiddlewareHandler<AppEnv> = async (c, next) => (c.var.session ? next() : unauthenticated(c));

// The browser's Origin, when it names one, must be this host (`Origin: null` comes from privacy
// settings: the token decides). hono/csrf is that check, for the content types a cross-site form can
// send (any other needs a CORS preflight, which the portal never grants); Sec-Fetch-Site does not
// replace it. Its 403 becomes the portal's CSRF page in formPost, which checks the token on every POST.
const sameOrigin = csrf({
  origin: (origin, c) => {
    try {
      return new URL(origin).host === c.req.header('host');
    } catch {
      return false;
    }
  },
  secFetchSite: () => false,
});
/** The form's Origin check of every POST (exported for the operator's console, src/console/). */
export async function originAllowed(c: Context): Promise<boolean> {
  const origin = c.req.header('origin');
  if (!origin || origin === 'null') return true;
  try {
    await sameOrigin(c, async () => {});
    return true;
  } catch (err) {
    if (err instanceof HTTPException && err.status === 403) return false;
    throw err;
  }
}

/**
 * Every POST form: at most MAX_FORM_BYTES (413), no NUL or control characters (400, naming the field), and CSRF (403): the same-origin check
 * and the synchronizer token (the session's secret; before sign-in, the double-submit cookie).
 */
export function formPost(r: Renderer): [MiddlewareHandler<AppEnv>, MiddlewareHandler<AppEnv>] {
  const readForm: MiddlewareHandler<AppEnv> = async (c, next) => {
    const { t, session } = c.var;
    const parsed = parseForm(Buffer.from(await c.req.arrayBuffer()));
    if ('badField' in parsed)
      return r.page(c, 400, t('error.bad_form_title'), (vc) => V.messagePage(vc, '400', t('error.bad_field', { field: parsed.badField })));
    const form = parsed.form;
    const originOk = await originAllowed(c);
    const expected = session ? session.csrf : getCookie(c, PRE_CSRF_COOKIE);
    if (!originOk || !tokensEqual(one(form, '_csrf'), expected)) {
      log.warn('csrf check failed', { path: c.var.url.pathname, has_session: !!session, origin_ok: originOk });
      return r.page(c, 403, 'CSRF', (vc) => V.messagePage(vc, '403', t('error.csrf')));
    }
    c.set('form', form);
    await next();
  };
  return [bodyLimit({ maxSize: MAX_FORM_BYTES, onError: (c) => send(c, 413, TEXT, 'Payload Too Large') }), readForm];
}

/** PostgreSQL away or too slow: a 503 to come back later (a PSP delivers its webhook again); anything else a 500. */
export const onError: ErrorHandler<AppEnv> = (err, c) => {
  const path = c.req.path.startsWith('/webhooks/') ? '/webhooks/pix/…' : c.req.path;
  const t = c.var.t ?? translator('pt-BR');
  if (classifyDbError(err)) {
    log.warn('portal request refused: database unavailable', { method: c.req.method, path, code: (err as { code?: string }).code });
    return send(c, 503, TEXT, t('error.unavailable'), { 'retry-after': '5' });
  }
  log.error('portal request failed', { err, method: c.req.method, path });
  return send(c, 500, TEXT, t('error.internal'));
};
