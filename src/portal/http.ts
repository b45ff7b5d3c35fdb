import type http from 'node:http';
import type { Session } from './auth.ts';
import type { Lang, T } from './i18n/index.ts';

// The portal's HTTP plumbing: one request's context, cookies, forms, and the response helpers
// every page goes through (security headers, no-store, pending cookies).

export const SESSION_COOKIE = 'catraca_session';
export const PRE_CSRF_COOKIE = 'catraca_csrf';
export const LANG_COOKIE = 'catraca_lang';
export const MAX_FORM_BYTES = 64 * 1024;

export type Form = Record<string, string | string[]>;
/** The one-time flash of a key created in the portal. */
export type CreatedKeyFlash = { key: string; id: string; label: string };

export interface Ctx {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  lang: Lang;
  t: T;
  session: Session | null;
  cookies: Record<string, string>;
  secure: boolean;
  ip: string;
  preCsrf: string;
}

export function parseCookies(h: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (h ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    if (k && !(k in out)) {
      try {
        out[k] = decodeURIComponent(part.slice(i + 1).trim());
      } catch {
        /* ignore malformed */
      }
    }
  }
  return out;
}

export function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    let size = 0;
    let over = false;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) over = true;
      else chunks.push(c);
    });
    req.on('end', () => resolve(over ? null : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** The right-most X-Forwarded-For entry (repeated headers are joined with ", " by node). */
export function lastForwardedFor(h: string | string[] | undefined): string {
  const parts = (Array.isArray(h) ? h.join(',') : (h ?? ''))
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  return (parts[parts.length - 1] ?? '').slice(0, 100);
}

/** decodeURIComponent, or null for a malformed escape (`%zz`, a lone `%`, a cut UTF-8 sequence). */
export function safeDecode(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

/**
 * The request's URL, its path exactly as sent: `//x` stays a path (the URL parser would take `x` for
 * a host, and throw for `//`, `//%zz` or `//[::1`, which crashed the process: the parse ran outside
 * the handler's try). An absolute-form target (`http://host/p`) keeps its path and query. Null when
 * nothing usable is there (answered 400).
 */
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

/**
 * A posted form; null when a name or value holds NUL (`%00`): PostgreSQL text cannot store it, so
 * such a form would fail at its first query (a 500) — it is refused with a 400 before anything runs.
 */
export function parseForm(body: Buffer): Form | null {
  const out: Form = {};
  for (const [k, v] of new URLSearchParams(body.toString('utf8'))) {
    if (k.includes('\u0000') || v.includes('\u0000')) return null;
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}
export const one = (f: Form, k: string) => {
  const v = f[k];
  return Array.isArray(v) ? (v[0] ?? '') : (v ?? '');
};

export const securityHeaders = {
  'content-security-policy':
    "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
};
export const cookie = (ctx: Ctx, name: string, value: string, maxAgeS: number, httpOnly = true) =>
  `${name}=${encodeURIComponent(value)}; Path=/; Max-Age=${maxAgeS}; SameSite=Lax${httpOnly ? '; HttpOnly' : ''}${ctx.secure ? '; Secure' : ''}`;
const pendingCookies = new WeakMap<http.ServerResponse, string[]>();
export const addCookie = (ctx: Ctx, c: string) => pendingCookies.set(ctx.res, [...(pendingCookies.get(ctx.res) ?? []), c]);

export const send = (ctx: Ctx, status: number, type: string, body: string | Buffer, extra: Record<string, string> = {}) => {
  const cookies = pendingCookies.get(ctx.res);
  ctx.res.writeHead(status, {
    ...securityHeaders,
    'content-type': type,
    'cache-control': 'no-store',
    ...(cookies ? { 'set-cookie': cookies } : {}),
    ...extra,
  });
  ctx.res.end(body);
};
export const redirect = (ctx: Ctx, to: string) => send(ctx, 303, 'text/plain; charset=utf-8', '', { location: to });
export const json = (ctx: Ctx, status: number, body: unknown) => send(ctx, status, 'application/json; charset=utf-8', JSON.stringify(body));
