import type { Context } from 'hono';
import type { secureHeaders } from 'hono/secure-headers';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

// What every web app here (the portal, the console) does with HTTP: its security headers, forms,
// the request's URL, the link to the other language, and the response helpers every page goes
// through (content type, no-store).

export const MAX_FORM_BYTES = 64 * 1024;
export type Form = Record<string, string | string[]>;
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

export const TEXT = 'text/plain; charset=utf-8';
export const send = (c: Context, status: number, type: string, body: string | Uint8Array<ArrayBuffer>, extra: Record<string, string> = {}): Response =>
  c.body(body, status as ContentfulStatusCode, { 'content-type': type, 'cache-control': 'no-store', ...extra });
export const redirect = (c: Context, to: string): Response => send(c, 303, TEXT, '', { location: to });
export const json = (c: Context, status: number, body: unknown, extra: Record<string, string> = {}): Response =>
  send(c, status, 'application/json; charset=utf-8', JSON.stringify(body), extra);

/** hono/secure-headers, set to the headers every web app sends and nothing more (HSTS: see secureHeadersFor). */
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

/** HSTS is sent whenever the app's public URL is https (a year; subdomains are the operator's to decide). */
export const HSTS = 'max-age=31536000';
export const secureHeadersFor = (publicHttps: boolean): Parameters<typeof secureHeaders>[0] => ({
  ...SECURE_HEADERS,
  strictTransportSecurity: publicHttps ? HSTS : false,
});
