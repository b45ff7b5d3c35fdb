import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { deleteCookie, setCookie } from 'hono/cookie';
import type { secureHeaders } from 'hono/secure-headers';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Session } from './auth.ts';
import type { Lang, T } from './i18n/index.ts';

// The portal's HTTP plumbing: what a request carries through the Hono app (AppEnv), cookies,
// forms, and the response helpers every page goes through (content type, no-store).

export const SESSION_COOKIE = 'catraca_session';
export const PRE_CSRF_COOKIE = 'catraca_csrf';
export const LANG_COOKIE = 'catraca_lang';
export const MAX_FORM_BYTES = 64 * 1024;
export const MAX_WEBHOOK_BYTES = 256 * 1024;

export type Form = Record<string, string | string[]>;
/** The one-time flash of a key created in the portal. */
export type CreatedKeyFlash = { key: string; id: string; label: string };

export interface AppEnv {
  Bindings: HttpBindings;
  Variables: {
    /** The request's URL, its path as sent (see requestUrl). */
    url: URL;
    lang: Lang;
    t: T;
    session: Session | null;
    /** Cookies get `Secure` (an https public URL, TLS, https at a trusted proxy, or forced by configuration). */
    secure: boolean;
    /** The client address: the socket's peer, or behind a trusted proxy the address it forwarded (src/portal/proxy.ts). */
    ip: string;
    /** Before sign-in: the double-submit CSRF token of this browser. */
    preCsrf: string;
    /** A POST's parsed form (set once it passed the size limit, NUL and CSRF checks). */
    form: Form;
  };
}
export type Ctx = Context<AppEnv>;

/** hono/secure-headers, set to the portal's headers and nothing more (HSTS: see secureHeadersFor). */
export const SECURE_HEADERS: Parameters<typeof secureHeaders>[0] = {
  contentSecurityPolicy: {
    defaultSrc: ["'self'"],
    imgSrc: ["'self'", 'data:'],
    scriptSrc: ["'self'"],
    styleSrc: ["'self'"],
    connectSrc: ["'self'"],
    formAction: ["'self'"],
    frameAncestors: ["'none'"],
    baseUri: ["'none'"],
  },
  xContentTypeOptions: true,
  xFrameOptions: 'DENY',
  referrerPolicy: 'same-origin',
  crossOriginResourcePolicy: false,
  crossOriginOpenerPolicy: false,
  originAgentCluster: false,
  strictTransportSecurity: false,
  xDnsPrefetchControl: false,
  xDownloadOptions: false,
  xPermittedCrossDomainPolicies: false,
  xXssProtection: false,
};

/** HSTS is sent whenever the portal's public URL is https (a year; subdomains are the operator's to decide). */
export const HSTS = 'max-age=31536000';
export const secureHeadersFor = (publicHttps: boolean): Parameters<typeof secureHeaders>[0] => ({
  ...SECURE_HEADERS,
  strictTransportSecurity: publicHttps ? HSTS : false,
});

/**
 * The request's URL, its path exactly as sent: `//x` stays a path (the URL parser would take `x` for
 * a host, and throw for `//`, `//%zz` or `//[::1`). An absolute-form target (`http://host/p`) keeps
 * its path and query. Null when nothing usable is there (answered 400).
 */
/**
 * The link to this page in the other language: the request's own path, which may be anything a
 * client sent (`//`, `//other.host/x`), parsed as a path of ours (never a host) and written with one
 * leading slash, so that the link can never be protocol-relative (`//other.host/…`).
 */
export function otherLangHref(path: string, other: string): string {
  try {
    const u = new URL(`http://self/${path.replace(/^\/+/, '')}`);
    u.searchParams.set('lang', other);
    return u.pathname + u.search;
  } catch {
    return `/?lang=${other}`;
  }
}

export function requestUrl(target: string | undefined): URL | null {
  const raw = target || '/';
  try {
    if (raw.startsWith('/')) return new URL(`http://portal${raw}`);
    const abs = new URL(raw);
    return new URL(`http://portal${abs.pathname}${abs.search}`);
  } catch {
    return null;
  }
}

/** Fields that never reach PostgreSQL (only a hash of them does): any character but NUL is the user's choice. */
const SECRET_FIELDS = new Set(['password']);

/**
 * A posted form, or the name of its first field that PostgreSQL cannot store or that holds a
 * control character (U+0000–U+001F, U+007F–U+009F): NUL (`%00`) in any field, other control
 * characters in any field but a password. Such a form is refused with a 400 naming the field
 * before anything runs (a NUL reaching PostgreSQL text would be a 500).
 */
export function parseForm(body: Buffer): { form: Form } | { badField: string } {
  const out: Form = {};
  for (const [k, v] of new URLSearchParams(body.toString('utf8'))) {
    if (/\p{Cc}/u.test(k) || v.includes('\u0000') || (!SECRET_FIELDS.has(k) && /\p{Cc}/u.test(v)))
      return { badField: k.replace(/\p{Cc}/gu, '\uFFFD').slice(0, 40) };
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return { form: out };
}
export const one = (f: Form, k: string) => {
  const v = f[k];
  return Array.isArray(v) ? (v[0] ?? '') : (v ?? '');
};

const cookieOptions = (c: Ctx) => ({ path: '/', sameSite: 'Lax', httpOnly: true, secure: c.var.secure }) as const;
export const setPortalCookie = (c: Ctx, name: string, value: string, maxAgeS: number) => setCookie(c, name, value, { ...cookieOptions(c), maxAge: maxAgeS });
export const clearPortalCookie = (c: Ctx, name: string) => deleteCookie(c, name, cookieOptions(c));

export const TEXT = 'text/plain; charset=utf-8';
export const send = (c: Context, status: number, type: string, body: string | Uint8Array<ArrayBuffer>, extra: Record<string, string> = {}): Response =>
  c.body(body, status as ContentfulStatusCode, { 'content-type': type, 'cache-control': 'no-store', ...extra });
export const redirect = (c: Context, to: string): Response => send(c, 303, TEXT, '', { location: to });
export const json = (c: Context, status: number, body: unknown, extra: Record<string, string> = {}): Response =>
  send(c, status, 'application/json; charset=utf-8', JSON.stringify(body), extra);

/** The signed-in tenant (routes behind requireSession only). */
export function tenantOf(c: Ctx): string {
  if (!c.var.session) throw new Error('no session: route registered before requireSession');
  return c.var.session.user.tenant_id;
}
