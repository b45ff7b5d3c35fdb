import type { MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import { createLogger } from '../log.ts';
import type { AppEnv, Ctx } from './http.ts';
import { json } from '../web/http.ts';
import { type Renderer, unauthenticated } from './render.ts';
import { may, type RoutePermission } from './roles.ts';
import * as V from './views/layout.ts';

// The role check of every portal route: each declares its permission with `can(…)` as its first
// handler; `authorize` refuses what the member's role may not do (the table is in roles.ts).

const log = createLogger('portal');

const declared = new WeakMap<object, RoutePermission>();

/** Declares the permission of the route it is the first handler of (`app.get('/ledger', can('statement'), …)`). */
export function can(permission: RoutePermission): MiddlewareHandler<AppEnv> {
  const marker: MiddlewareHandler<AppEnv> = (_c, next) => next();
  declared.set(marker, permission);
  return marker;
}

interface RouteEntry {
  method: string;
  path: string;
  handler: unknown;
}

const middlewares = new WeakSet<object>();

/**
 * Marks handlers as middleware (`app.use(middleware(h))`): what runs on its way to an endpoint and
 * declares no permission. Every other handler, whatever its path (`/x/*` and `*` included), is an
 * endpoint that must declare one with `can(…)`; authorize refuses it otherwise.
 */
export function middleware<T extends object[]>(...handlers: T): T {
  for (const h of handlers) middlewares.add(h);
  return handlers;
}
const isEndpoint = (r: RouteEntry) => !middlewares.has(r.handler as object);

/** The permission a route (method and path as registered) declared among its handlers, if any. */
export function declaredPermission(routes: readonly RouteEntry[], method: string, path: string): RoutePermission | undefined {
  for (const r of routes) if (r.method === method && r.path === path && declared.has(r.handler as object)) return declared.get(r.handler as object);
  return undefined;
}

/** Every endpoint of an app (`app.routes` without the handlers marked `middleware`, wildcard paths included), once per method and path. */
export function endpointsOf(routes: readonly RouteEntry[]): Array<{ method: string; path: string }> {
  const seen = new Map<string, { method: string; path: string }>();
  for (const r of routes.filter(isEndpoint)) seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path });
  return [...seen.values()];
}

/** 403: the page, or for the status poll its JSON. */
export function forbidden(c: Ctx, r: Renderer): Promise<Response> | Response {
  const t = c.var.t;
  if (c.var.url.pathname.endsWith('/status')) return json(c, 403, { error: 'forbidden' });
  const role = c.var.session?.user.role;
  return r.page(c, 403, t('error.forbidden_title'), (vc) =>
    V.messagePage(vc, '403', t('error.forbidden', { role: role ? t(`role.${role}`) : '' }), { href: '/dashboard', label: t('nav.dashboard') }),
  );
}

/**
 * Checks the role of the session's member against the permissions the matched routes declared:
 * every endpoint that matched (each handler not marked `middleware`, a wildcard path as much as any
 * other) must have declared one, and the role must be allowed each of them — else 403 (with an
 * error in the log when one declared nothing). A path no endpoint answers goes on to the 404 page.
 */
export function authorize(r: Renderer): MiddlewareHandler<AppEnv> {
  const check: MiddlewareHandler<AppEnv> = async (c, next) => {
    const session = c.var.session;
    if (!session) return unauthenticated(c);
    const routes = matchedRoutes(c).slice(c.req.routeIndex + 1);
    const endpoints = endpointsOf(routes);
    for (const endpoint of endpoints) {
      const permission = declaredPermission(routes, endpoint.method, endpoint.path);
      if (permission === undefined) {
        log.error('portal route without a declared permission: refused', { method: endpoint.method, path: endpoint.path });
        return forbidden(c, r);
      }
      if (permission !== 'public' && !may(session.user.role, permission)) {
        log.info('portal action refused to the role', { user: session.user.id, role: session.user.role, action: permission, path: c.var.url.pathname });
        return forbidden(c, r);
      }
    }
    await next();
  };
  middleware(check);
  return check;
}
