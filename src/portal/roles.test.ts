import { Hono, type MiddlewareHandler } from 'hono';
import { describe, expect, it } from 'vitest';
import type { AppEnv } from './http.ts';
import { translator } from './i18n/index.ts';
import type { Renderer } from './render.ts';
import { type Role, ROLES } from '../db/members.ts';
import { may, PERMISSIONS } from './roles.ts';
import { authorize, can, declaredPermission, endpointsOf, middleware } from './authorize.ts';

describe('the permission table', () => {
  it('is the roles table of issue 20', () => {
    const actionsOf = (role: Role) => Object.keys(PERMISSIONS).filter((a) => may(role, a as keyof typeof PERMISSIONS));
    expect(Object.fromEntries(ROLES.map((r) => [r, actionsOf(r)]))).toEqual({
      owner: [
        'usage',
        'account',
        'keys',
        'keys.all',
        'keys.data_country',
        'topup',
        'statement',
        'exports',
        'notifications',
        'invoices',
        'batches',
        'batches.results',
        'batches.cancel',
        'members',
        'members.owners',
      ],
      admin: ['usage', 'account', 'keys', 'keys.all', 'keys.data_country', 'batches', 'batches.results', 'batches.cancel', 'members'],
      billing: ['usage', 'account', 'topup', 'statement', 'exports', 'notifications', 'invoices', 'batches'],
      developer: ['usage', 'account', 'keys', 'batches', 'batches.results', 'batches.cancel'],
    });
  });
});

describe('authorize', () => {
  // a page renderer that says which page it rendered
  const r: Renderer = { page: async (c, status, title) => c.text(title, status as 403), notFound: async (c) => c.text('404', 404) };
  function app(role: Role | null) {
    const a = new Hono<AppEnv>();
    a.use(async (c, next) => {
      c.set('url', new URL(`http://portal${c.req.path}`));
      c.set('t', translator('en'));
      c.set('session', role ? ({ user: { id: 'usr_1', role } } as never) : null);
      await next();
    });
    a.use(authorize(r));
    a.get('/ledger', can('statement'), (c) => c.text('ledger'));
    a.get('/forgotten', (c) => c.text('open?'));
    // a wildcard endpoint that declared nothing, and one that did (the path also matches /ledger/x)
    a.get('/files/*', (c) => c.text('open?'));
    a.get('/ledger/*', can('statement'), (c) => c.text('ledger files'));
    // marked middleware after authorize: no permission needed, it lets the endpoint decide
    const passOn: MiddlewareHandler<AppEnv> = async (_c, next) => next();
    a.use('/ledger/*', ...middleware(passOn));
    return a;
  }

  it('lets a role through to what it may do, and answers 403 otherwise', async () => {
    expect(await (await app('billing').request('/ledger')).text()).toBe('ledger');
    const refused = await app('developer').request('/ledger');
    expect([refused.status, await refused.text()]).toEqual([403, 'Access denied']);
  });

  it('refuses a route that declared no permission, to every role (closed, not open)', async () => {
    for (const role of ROLES) {
      const res = await app(role).request('/forgotten');
      expect([role, res.status]).toEqual([role, 403]);
    }
    expect(declaredPermission(app('owner').routes, 'GET', '/forgotten')).toBe(undefined);
    expect(declaredPermission(app('owner').routes, 'GET', '/ledger')).toBe('statement');
  });

  it('a wildcard endpoint is checked like any other: refused when it declared nothing, by its permission otherwise', async () => {
    for (const role of ROLES) expect([role, (await app(role).request('/files/x')).status]).toEqual([role, 403]);
    expect(await (await app('billing').request('/ledger/2026')).text()).toBe('ledger files');
    expect((await app('developer').request('/ledger/2026')).status).toBe(403);
    const endpoints = endpointsOf(app('owner').routes).map((e) => `${e.method} ${e.path}`);
    expect(endpoints).toEqual(expect.arrayContaining(['GET /files/*', 'GET /ledger/*']));
    expect(endpoints).not.toContain('ALL /ledger/*');
  });

  it('without a session: the sign-in page; a path no route answers: on to the 404', async () => {
    const res = await app(null).request('/ledger');
    expect([res.status, res.headers.get('location')]).toEqual([303, '/login']);
    expect((await app('developer').request('/nowhere')).status).toBe(404);
  });
});
