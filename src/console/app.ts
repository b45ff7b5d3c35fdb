import { Hono } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { secureHeadersFor, send, TEXT } from '../web/http.ts';
import { allowedMethods, dropUnreadBody } from '../web/middleware.ts';
import type { TrustFn } from '../web/proxy.ts';
import type { ConsoleEnv } from './http.ts';
import { formPost, onError, operatorLoader, requestContext, requireOperator } from './middleware.ts';
import { renderer } from './render.ts';
import { loginRoutes, logoutRoutes } from './routes/auth.ts';
import { catalogRoutes } from './routes/catalog.ts';
import { fxRoutes } from './routes/fx.ts';
import { batchRoutes } from './routes/batches.ts';
import { moneyRoutes } from './routes/money.ts';
import { nfseRoutes } from './routes/nfse.ts';
import { publicRoutes, systemRoutes } from './routes/system.ts';
import { tenantRoutes } from './routes/tenants.ts';

export interface ConsoleDeps {
  db: pg.Pool;
  /** Front doors and workers are told of changes on it (null: they learn them later; the pages say so). */
  nc: NatsConnection | null;
  trust: TrustFn;
  /** CONSOLE_PUBLIC_URL is https: Secure cookies and HSTS. */
  publicHttps: boolean;
}

/**
 * The console as one Hono app, in this order: the static files and the health check; the
 * operator's session; the sign-in page (its form checked as every form); then nothing without an
 * operator's session (a redirect to the sign-in page, before any form is read), every POST's form
 * checked (size, control characters, CSRF), and the pages.
 */
export function createConsoleApp(d: ConsoleDeps): Hono<ConsoleEnv> {
  const r = renderer(d.db);
  const app = new Hono<ConsoleEnv>();
  app.onError(onError);
  app.use(dropUnreadBody());
  app.use(secureHeaders(secureHeadersFor(d.publicHttps)));
  app.use(requestContext({ trust: d.trust, publicHttps: d.publicHttps }));
  app.route('/', publicRoutes());
  app.use(allowedMethods());
  app.use(operatorLoader(d.db));
  const [formLimit, formChecks] = formPost(r);
  app.post('/login', formLimit, formChecks);
  app.route('/', loginRoutes(d.db, r));
  app.use(requireOperator);
  app.post('*', formLimit, formChecks);
  app.route('/', logoutRoutes(d.db));
  app.route('/', tenantRoutes(d, r));
  app.route('/', catalogRoutes(d, r));
  app.route('/', moneyRoutes(d.db, r));
  app.route('/', batchRoutes(d.db, r));
  app.route('/', nfseRoutes(d.db, r));
  app.route('/', fxRoutes(d, r));
  app.route('/', systemRoutes(d.db, r));
  app.notFound((c) => (c.var.operator ? r.notFound(c) : send(c, 303, TEXT, '', { location: '/login' })));
  return app;
}
