import type { MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import { createLogger } from '../log.ts';
import { type AppEnv, type Ctx, json } from './http.ts';
import { type Renderer, unauthenticated } from './render.ts';
import { may, type RoutePermission } from './roles.ts';
import * as V from './views.ts';

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
const isEndpoint = (r: RouteEntry) => !r.path.endsWith('*');

/** The permission a route (method and path as registered) declared among its handlers, if any. */
export function declaredPermission(routes: readonly RouteEntry[], method: string, path: string): RoutePermission | undefined {
  for (const r of routes) if (r.method === method && r.path === path && declared.has(r.handler as object)) return declared.get(r.handler as object);
  return undefined;
}

/** Every endpoint of an app (`app.routes`, without the middleware of `use` and `*`), once per method and path. */
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
 * Checks the role of the session's member against the permission the matched route declared:
 * 403 when the role may not, 403 (and an error in the log) when the route declared nothing. A
 * path no route answers goes on to the 404 page.
 */
export function authorize(r: Renderer): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const session = c.var.session;
    if (!session) return unauthenticated(c);
    const routes = matchedRoutes(c).slice(c.req.routeIndex + 1);
    const endpoint = routes.find(isEndpoint);
    if (!endpoint) return next();
    const permission = declaredPermission(routes, endpoint.method, endpoint.path);
    if (permission === undefined) {
      log.error('portal route without a declared permission: refused', { method: endpoint.method, path: endpoint.path });
      return forbidden(c, r);
    }
    if (permission !== 'public' && !may(session.user.role, permission)) {
      log.info('portal action refused to the role', { user: session.user.id, role: session.user.role, action: permission, path: c.var.url.pathname });
      return forbidden(c, r);
    }
    await next();
  };
}
