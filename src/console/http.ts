import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { deleteCookie, setCookie } from 'hono/cookie';
import type { WebVariables } from '../web/middleware.ts';
import type { Operator } from './auth.ts';
import type { T } from './i18n/index.ts';

// What a console request carries through its Hono app. The cookies are the console's own, never
// the portal's (a tenant's portal session means nothing here): SameSite=Strict, HttpOnly, Secure
// when the console is reached over https.

export const SESSION_COOKIE = 'catraca_console_session';
export const PRE_CSRF_COOKIE = 'catraca_console_csrf';
export const LANG_COOKIE = 'catraca_console_lang';

export interface OperatorSession {
  operator: Operator;
  csrf: string;
  idHash: Buffer;
}

export interface ConsoleEnv {
  Bindings: HttpBindings;
  /** The variables every web app's request carries (src/web/middleware.ts), and the operator's session. */
  Variables: WebVariables<T> & { operator: OperatorSession | null };
}
export type CCtx = Context<ConsoleEnv>;

const cookieOptions = (c: CCtx) => ({ path: '/', sameSite: 'Strict', httpOnly: true, secure: c.var.secure }) as const;
export const setConsoleCookie = (c: CCtx, name: string, value: string, maxAgeS: number) => setCookie(c, name, value, { ...cookieOptions(c), maxAge: maxAgeS });
export const clearConsoleCookie = (c: CCtx, name: string) => deleteCookie(c, name, cookieOptions(c));

/** The signed-in operator (routes behind requireOperator only). */
export function operatorOf(c: CCtx): OperatorSession {
  if (!c.var.operator) throw new Error('no operator: route registered before requireOperator');
  return c.var.operator;
}
