import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { deleteCookie, setCookie } from 'hono/cookie';
import type { Session } from './auth.ts';
import type { Lang, T } from './i18n/index.ts';
import type { Form } from '../web/http.ts';

// The portal's HTTP plumbing: what a request carries through the Hono app (AppEnv), its cookies
// and headers; forms and response helpers are src/web/http.ts.

export const SESSION_COOKIE = 'catraca_session';
export const PRE_CSRF_COOKIE = 'catraca_csrf';
export const LANG_COOKIE = 'catraca_lang';
export const MAX_WEBHOOK_BYTES = 256 * 1024;

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
    /** The client address: the socket's peer, or behind a trusted proxy the address it forwarded (src/web/proxy.ts). */
    ip: string;
    /** Before sign-in: the double-submit CSRF token of this browser. */
    preCsrf: string;
    /** A POST's parsed form (set once it passed the size limit, NUL and CSRF checks). */
    form: Form;
  };
}
export type Ctx = Context<AppEnv>;

/**
 * The request's URL, its path exactly as sent: `//x` stays a path (the URL parser would take `x` for
 * a host, and throw for `//`, `//%zz` or `//[::1`). An absolute-form target (`http://host/p`) keeps
 * its path and query. Null when nothing usable is there (answered 400).
 */
const cookieOptions = (c: Ctx) => ({ path: '/', sameSite: 'Lax', httpOnly: true, secure: c.var.secure }) as const;
export const setPortalCookie = (c: Ctx, name: string, value: string, maxAgeS: number) => setCookie(c, name, value, { ...cookieOptions(c), maxAge: maxAgeS });
export const clearPortalCookie = (c: Ctx, name: string) => deleteCookie(c, name, cookieOptions(c));

/** The signed-in tenant (routes behind requireSession only). */
export function tenantOf(c: Ctx): string {
  if (!c.var.session) throw new Error('no session: route registered before requireSession');
  return c.var.session.user.tenant_id;
}
