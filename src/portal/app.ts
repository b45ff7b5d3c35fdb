import { Hono } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import type { Mailer } from '../mail/index.ts';
import type { Metrics } from '../metrics/registry.ts';
import type { PixService } from '../pix/service.ts';
import type { PixSimulator } from '../pix/simulator/server.ts';
import type { AppEnv } from './http.ts';
import { secureHeadersFor } from '../web/http.ts';
import { allowedMethods, dropUnreadBody } from '../web/middleware.ts';
import { formPost, onError, requestContext, requireSession, sessionLoader } from './middleware.ts';
import { renderer } from './render.ts';
import { authRoutes, linkRoutes } from './routes/auth.ts';
import type { TrustFn } from '../web/proxy.ts';
import { devMailRoutes, devRoutes } from './routes/dev.ts';
import { type ExportLimits, exportRoutes } from './routes/exports.ts';
import { keysRoutes } from './routes/keys.ts';
import { accountRoutes, invitationRoutes, memberRoutes } from './routes/members.ts';
import { authorize, middleware } from './authorize.ts';
import { notificationsRoutes } from './routes/notifications.ts';
import type { Resolver } from '../notify/ssrf.ts';
import { healthRoutes, staticRoutes } from './routes/system.ts';
import { topUpRoutes } from './routes/topup.ts';
import { usageRoutes } from './routes/usage.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { recurringRoutes } from './routes/recurring.ts';
import { invoiceRoutes } from './routes/invoices.ts';
import { batchesRoutes } from './routes/batches.ts';
import type { RecurringService } from '../pix/recurring/service.ts';

export interface PortalDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
  pix: PixService;
  /** Recurring top-ups (Pix Automático), null when the PSP adapter has none. */
  recurring?: RecurringService | null;
  simulator: PixSimulator | null;
  devMode: boolean;
  gatewayUrl: string;
  signupLimit: number;
  /** Who may forward client addresses (PORTAL_TRUSTED_PROXIES). */
  trust: TrustFn;
  secureMode: 'auto' | boolean;
  /** PORTAL_PUBLIC_URL is https: Secure cookies and HSTS. */
  publicHttps: boolean;
  metrics: Metrics;
  mailer: Mailer;
  /** The public base URL of the links in e-mails (set once the portal listens, when PORTAL_PUBLIC_URL is unset). */
  site: { url: string };
  devMailDir?: string;
  /** CSV exports at once and their stall timeout (default EXPORT_LIMITS). */
  exportLimits?: ExportLimits;
  /** The resolver of webhook hosts for the SSRF check (tests); default the system's. */
  notifyResolve?: Resolver;
  /** NFS-e issuing is on: a top-up needs the tenant's "Dados fiscais" first. */
  invoicing?: boolean;
}

/**
 * The portal as one Hono app. Order matters (Hono runs what matches in the order it was added): the
 * static files and the PSP's webhook need no session and no form; every other request loads the
 * session, POSTs pass the form checks, and everything after the sign-in pages needs a session and
 * a role allowed to do what the route declared (src/portal/roles.ts).
 */
export function createPortalApp(d: PortalDeps): Hono<AppEnv> {
  const r = renderer(d.db);
  const app = new Hono<AppEnv>();
  app.onError(onError);
  app.use(...middleware(dropUnreadBody(), secureHeaders(secureHeadersFor(d.publicHttps)), requestContext(d)));
  app.route('/', staticRoutes());
  app.route('/', webhookRoutes(d.pix, d.metrics, d.recurring ?? null));
  app.use(...middleware(sessionLoader(d.db)));
  app.route('/', healthRoutes());
  app.use(...middleware(allowedMethods()));
  const [formLimit, formChecks] = formPost(r);
  app.post('*', ...middleware(formLimit, formChecks));
  app.route('/', authRoutes(d, r));
  app.route('/', linkRoutes(d, r));
  app.route('/', invitationRoutes(d, r));
  if (d.devMode) app.route('/', devMailRoutes(d, r));
  app.use(...middleware(requireSession));
  app.use(authorize(r));
  app.route('/', usageRoutes(d, r));
  app.route('/', exportRoutes(d, r, d.exportLimits));
  app.route('/', recurringRoutes(d.recurring ?? null, r, { db: d.db, invoicing: d.invoicing ?? false }));
  app.route('/', topUpRoutes({ ...d, invoicing: d.invoicing ?? false }, r));
  app.route('/', invoiceRoutes({ db: d.db, invoicing: d.invoicing ?? false }, r));
  app.route('/', batchesRoutes(d, r));
  app.route('/', keysRoutes(d, r));
  app.route('/', memberRoutes(d, r));
  app.route('/', accountRoutes(d, r));
  app.route('/', notificationsRoutes(d, r));
  if (d.devMode) app.route('/', devRoutes(d, r));
  app.notFound(r.notFound);
  return app;
}
