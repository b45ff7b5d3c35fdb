import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { Context, Env, ErrorHandler, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getCookie } from 'hono/cookie';
import { csrf } from 'hono/csrf';
import { HTTPException } from 'hono/http-exception';
import { classifyDbError } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { tokensEqual } from './sessions.ts';
import { type Form, MAX_FORM_BYTES, one, parseForm, requestUrl, send, TEXT } from './http.ts';
import { clientOf, type TrustFn } from './proxy.ts';
import { type Lang, parseLang } from './i18n.ts';

// The middleware the tenants' portal (src/portal/) and the operator's console (src/console/) share,
// parameterised by each app's env type: a body nobody read dropped, the methods allowed, the request context (URL, language, client address,
// Secure cookies), the pre-sign-in double-submit CSRF token, every POST form's checks (size,
// control characters, Origin, synchronizer token) and the error handler. Each app keeps what is
// its own: cookie names and attributes, its session, its pages and messages.

/** The variables every web app's request carries (each app adds its session and its own). */
export interface WebVariables<TFn> {
  url: URL;
  lang: Lang;
  t: TFn;
  /** Cookies get `Secure` (https public URL, TLS, or https at a trusted proxy). */
  secure: boolean;
  /** The client address (behind a trusted proxy, the one it forwarded). */
  ip: string;
  /** Before sign-in: the double-submit CSRF token of this browser. */
  preCsrf: string;
  /** A POST's form, once it passed the size, control-character and CSRF checks. */
  form: Form;
}
// biome-ignore lint/suspicious/noExplicitAny: the translator's key type is each app's own
export type WebEnv = { Bindings: HttpBindings; Variables: WebVariables<(key: any, vars?: Record<string, string | number>) => string> };

/**
 * A request body nobody read (a 413 decided on its Content-Length, a 405, a POST to /healthz) is read
 * and dropped before the answer goes out: answered with the body still on
 * the wire, @hono/node-server's clean-up can close the connection under a keep-alive client that
 * already sent its next request on it ("other side closed"). The server's requestTimeout bounds it.
 */
export function dropUnreadBody<E extends WebEnv>(): MiddlewareHandler<E> {
  return async (c, next) => {
    await next();
    const incoming = c.env.incoming;
    if (c.req.method === 'GET' || c.req.method === 'HEAD' || incoming.readableDidRead || incoming.readableEnded) return;
    try {
      for await (const _ of incoming);
    } catch {
      // the client went away: there is nobody to answer
    }
  };
}

/** GET, HEAD and POST; any other method is answered 405. */
export function allowedMethods<E extends WebEnv>(): MiddlewareHandler<E> {
  return async (c, next) => (['GET', 'HEAD', 'POST'].includes(c.req.method) ? next() : send(c, 405, TEXT, 'Method Not Allowed', { allow: 'GET, POST' }));
}

export interface WebContextOptions<E extends Env> {
  /** Who may forward client addresses (the app's *_TRUSTED_PROXIES, compiled). */
  trust: TrustFn;
  /** Whether cookies get `Secure`, given the request and whether it came through a trusted proxy. */
  secure: (incoming: IncomingMessage, viaProxy: boolean) => boolean;
  translator: (lang: Lang) => E['Variables'] extends { t: infer F } ? F : never;
  langCookie: string;
  preCsrfCookie: string;
  setCookie: (c: Context<E>, name: string, value: string, maxAgeS: number) => void;
  /** The app's own variables of a request that has no session yet (e.g. session: null). */
  init: (c: Context<E>) => void;
}

/** Every request: its URL, language (`?lang=` is kept in a cookie), client address, and whether cookies get `Secure`. */
export function webRequestContext<E extends WebEnv>(o: WebContextOptions<E>): MiddlewareHandler<E> {
  return async (c, next) => {
    const incoming = c.env.incoming;
    const url = requestUrl(incoming.url);
    if (!url) return send(c, 400, TEXT, 'Bad Request');
    // X-Forwarded-* only from a trusted proxy: anyone reaching the app directly forges them.
    const { ip, viaProxy } = clientOf(incoming, o.trust);
    const secure = o.secure(incoming, viaProxy);
    const queryLang = parseLang(url.searchParams.get('lang'));
    const lang: Lang = queryLang ?? parseLang(getCookie(c, o.langCookie)) ?? 'pt-BR';
    const set = c.set as unknown as (key: string, value: unknown) => void;
    set('url', url);
    set('lang', lang);
    set('t', o.translator(lang));
    set('secure', secure);
    set('ip', ip);
    o.init(c);
    set('preCsrf', getCookie(c, o.preCsrfCookie) ?? '');
    if (queryLang) o.setCookie(c, o.langCookie, queryLang, 365 * 86400);
    await next();
  };
}

/**
 * Without a session, a double-submit CSRF token for the sign-in forms: kept from the cookie when it
 * is well formed, else a new one on a GET (a POST without one fails the form check).
 */
export function ensurePreCsrf<E extends WebEnv>(c: Context<E>, o: { cookie: string; maxAgeS: number; setCookie: WebContextOptions<E>['setCookie'] }): void {
  const ctx = c as unknown as Context<WebEnv>;
  if (/^[A-Za-z0-9_-]{43}$/.test(ctx.var.preCsrf)) return;
  const token = c.req.method === 'GET' ? randomBytes(32).toString('base64url') : '';
  ctx.set('preCsrf', token);
  if (token) o.setCookie(c, o.cookie, token, o.maxAgeS);
}

// The browser's Origin, when it names one, must be this host (`Origin: null` comes from privacy
// settings: the token decides). hono/csrf is that check, for the content types a cross-site form can
// send (any other needs a CORS preflight, which neither app grants); Sec-Fetch-Site does not
// replace it. Its 403 becomes the app's CSRF page in formPost, which checks the token on every POST.
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
/** The form's Origin check of every POST. */
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

export interface FormPostOptions<E extends Env> {
  /** The synchronizer token the form must carry: the session's secret, or (before sign-in) the double-submit cookie's. */
  expectedToken: (c: Context<E>) => string | undefined;
  hasSession: (c: Context<E>) => boolean;
  /** The 400 page naming a field with a NUL or control character. */
  badField: (c: Context<E>, field: string) => Promise<Response> | Response;
  /** The 403 page of a failed CSRF check. */
  csrfFailed: (c: Context<E>) => Promise<Response> | Response;
  log: Logger;
  /** The log line of a failed check ('csrf check failed'). */
  logMessage: string;
}

/**
 * Every POST form: at most MAX_FORM_BYTES (413), no NUL or control characters (400, naming the
 * field), and CSRF (403): the same-origin check and the synchronizer token.
 */
export function webFormPost<E extends WebEnv>(o: FormPostOptions<E>): [MiddlewareHandler<E>, MiddlewareHandler<E>] {
  const readForm: MiddlewareHandler<E> = async (c, next) => {
    const parsed = parseForm(Buffer.from(await c.req.arrayBuffer()));
    if ('badField' in parsed) return o.badField(c, parsed.badField);
    const originOk = await originAllowed(c);
    if (!originOk || !tokensEqual(one(parsed.form, '_csrf'), o.expectedToken(c))) {
      o.log.warn(o.logMessage, { path: (c as unknown as Context<WebEnv>).var.url.pathname, has_session: o.hasSession(c), origin_ok: originOk });
      return o.csrfFailed(c);
    }
    (c as unknown as Context<WebEnv>).set('form', parsed.form);
    await next();
  };
  return [bodyLimit({ maxSize: MAX_FORM_BYTES, onError: (c) => send(c, 413, TEXT, 'Payload Too Large') }), readForm];
}

/** PostgreSQL away or too slow: a 503 to come back later; anything else a 500 (both in the request's language). */
export function webErrorHandler<E extends WebEnv>(o: {
  log: Logger;
  /** 'portal', 'console': the first word of the log lines. */
  app: string;
  /** The messages when the request has no translator yet (pt-BR). */
  fallback: (key: 'error.unavailable' | 'error.internal') => string;
  /** The path as logged (the portal hides its webhook secret). */
  logPath?: (path: string) => string;
}): ErrorHandler<E> {
  return (err, c) => {
    const path = o.logPath ? o.logPath(c.req.path) : c.req.path;
    const t = (c as unknown as Context<WebEnv>).var.t ?? o.fallback;
    if (classifyDbError(err)) {
      o.log.warn(`${o.app} request refused: database unavailable`, { method: c.req.method, path, code: (err as { code?: string }).code });
      return send(c, 503, TEXT, t('error.unavailable'), { 'retry-after': '5' });
    }
    o.log.error(`${o.app} request failed`, { err, method: c.req.method, path });
    return send(c, 500, TEXT, t('error.internal'));
  };
}
