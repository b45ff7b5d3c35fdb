import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener, RequestError } from '@hono/node-server';
import { Hono } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import type pg from 'pg';
import type { NatsConnection } from 'nats';
import { createLogger } from '../log.ts';
import { BcbPixAdapter } from '../pix/bcb.ts';
import { BcbRecurrenceApi } from '../pix/recurrence.ts';
import { RecurringService } from '../pix/recurring/service.ts';
import { PixService } from '../pix/service.ts';
import { subjects } from '../bus/subjects.ts';
import type { PixSimulator } from '../pix/simulator/server.ts';
import type { PspAdapter } from '../pix/types.ts';
import { createPortalApp } from './app.ts';
import { cleanUp, CLEANUP_INTERVAL_MS } from './cleanup.ts';
import { loadPortalEnv, receiverAccount, resolvePortalSetup, type PortalEnv } from './config.ts';
import type { AppEnv } from './http.ts';
import { requestUrl, SECURE_HEADERS, send, TEXT } from '../web/http.ts';
import { connectPsp } from './psp.ts';
import type { ExportLimits } from './routes/exports.ts';
import { compileTrust, LOOPBACK_PROXIES, trustedProxies } from '../web/proxy.ts';
import { createMailer, type Mailer } from '../mail/index.ts';
import { createMetrics, type Metrics } from '../metrics/registry.ts';
import { afterBalanceChange } from '../notify/bus.ts';
import { type NotifierOptions, startNotifier } from './notifier/dispatcher.ts';
import { parseSchedule } from '../config.ts';
import type { Resolver } from '../notify/ssrf.ts';
import { type IssuerTuning, type NfseService, startNfse } from '../nfse/start.ts';
import type { NfseSetup } from '../nfse/settings.ts';

export { requestUrl };

const log = createLogger('portal');

export interface StartPortalOptions {
  db: pg.Pool;
  nc: NatsConnection | null;
  port?: number;
  host?: string;
  /** A PSP adapter to use instead of the one PIX_PROVIDER selects (it must verify `webhookSecret`). */
  pixAdapter?: PspAdapter;
  webhookSecret?: string;
  /** Shows the simulator pay button; default: on when the built-in simulator is the PSP. */
  devMode?: boolean;
  gatewayUrl?: string;
  publicUrl?: string;
  secureCookies?: 'auto' | boolean;
  /** Called once per answered request with its HTTP status (metrics). */
  onResponse?: (status: number) => void;
  /** Reverse proxies whose X-Forwarded-For / -Proto count (default PORTAL_TRUSTED_PROXIES); `true`: loopback (the deprecated PORTAL_TRUST_PROXY=1). */
  trustedProxies?: string[] | true;
  /** The process's metrics (main.ts); default a registry of its own. */
  metrics?: Metrics;
  /** Sends the portal's e-mail (default: SMTP_URL). */
  mailer?: Mailer;
  /** How often the cleanup of src/portal/cleanup.ts runs (default 60 s; 0: never). */
  cleanupIntervalMs?: number;
  /** Sign-up attempts per client address per hour (default PORTAL_SIGNUP_LIMIT_PER_HOUR, 10). */
  signupLimitPerHour?: number;
  reconcileIntervalMs?: number;
  chargeExpiryS?: number;
  /** The clock of recurring top-ups (tests move it with the simulator's calendar); default the system's. */
  now?: () => Date;
  /** PUT /webhook/{chave} at start (default true). */
  registerWebhook?: boolean;
  /**
   * Runs the notifier (src/portal/notifier/dispatcher.ts: webhook and e-mail deliveries) in this process;
   * needs `nc`. main.ts: always; tests: when they ask, with settings over the configuration's.
   */
  notifier?: boolean | NotifierSettings;
  /** The resolver of webhook hosts (SSRF checks at save time and at delivery; tests); default the system's. */
  notifyResolve?: Resolver;
  /** The process's parsed settings (src/config.ts), from main.ts; tests may give a raw `env` instead. */
  config?: PortalEnv;
  env?: Record<string, string | undefined>;
  /** How many CSV exports may run at once, and when a stalled one ends (default EXPORT_LIMITS, src/portal/routes/exports.ts). */
  exportLimits?: ExportLimits;
  /** NFS-e issuing (src/nfse): false turns it off whatever NFSE_PROVIDER says; tests give settings and timings. */
  nfse?: false | { setup?: NfseSetup | null; tuning?: IssuerTuning };
}

export interface Portal {
  url: string;
  /** The Hono app (its `routes`: what test/portal/route-roles.test.ts checks every role against). */
  app: Hono<AppEnv>;
  pix: PixService;
  /** Recurring top-ups (Pix Automático); null when the PSP adapter has no recurrence API. */
  recurring: RecurringService | null;
  simulator: PixSimulator | null;
  /** NFS-e issuing, when on */
  nfse: NfseService | null;
  close(): Promise<void>;
}

export async function startPortal(options: StartPortalOptions): Promise<Portal> {
  const env: PortalEnv = options.config ?? loadPortalEnv(options.env ?? process.env);
  const db = options.db;
  const s = portalSettings(options, env);
  const mailer = options.mailer ?? createMailer({ url: env.SMTP_URL, from: env.SMTP_FROM });
  const site = { url: s.publicUrl ?? '' };
  // Refuses to start (PortalConfigError) without PIX_PROVIDER, with an incomplete bcb setup, or
  // with the simulator / dev mode on anything but a loopback address (src/portal/config.ts).
  const setup = resolvePortalSetup(env, { host: s.listenHost, adapterGiven: !!options.pixAdapter, devMode: options.devMode });
  const devMode = setup.devMode;
  const { psp, simulator, webhookSecret } = await connectPsp(db, env, setup, options);
  const nc = options.nc ?? null;
  // NFS-e issuing (src/nfse): refuses to start on settings that could only make rejected notes
  const nfse = options.nfse === false ? null : await startNfse({ db, nc, env, site, setup: options.nfse?.setup, tuning: options.nfse?.tuning });
  const pix = new PixService(db, psp, {
    expiresInS: options.chargeExpiryS ?? env.PIX_CHARGE_EXPIRY_S,
    // topup.credited and the balance crossings of a credit or refund (src/notify)
    notify: (tenantId, events) => afterBalanceChange(db, nc, tenantId, events, log),
    // a nota fiscal to issue or cancel was made with the credit or refund
    invoices: () => nfse?.issuer.kick(),
  });
  const recurring =
    psp instanceof BcbPixAdapter
      ? new RecurringService(db, new BcbRecurrenceApi(psp), pix, {
          account: receiverAccount(env, options.pixAdapter ? 'custom' : setup.provider),
          notify: (tenantId, events) => afterBalanceChange(db, nc, tenantId, events, log),
          now: options.now,
        })
      : null;

  const app = createPortalApp({
    db,
    nc,
    pix,
    recurring,
    simulator,
    devMode,
    gatewayUrl: s.gatewayUrl,
    signupLimit: s.signupLimit,
    trust: compileTrust(s.proxies),
    secureMode: s.secureMode,
    publicHttps: s.publicUrl?.startsWith('https:') ?? false,
    metrics: options.metrics ?? createMetrics(),
    mailer,
    site,
    devMailDir: env.DEV_MAIL_DIR,
    ...(options.exportLimits ? { exportLimits: options.exportLimits } : {}),
    notifyResolve: options.notifyResolve,
    invoicing: nfse !== null,
  });
  const { server, url } = await listen(app, s.listenHost, options);

  site.url ||= url;
  if (options.registerWebhook !== false)
    await registerPixWebhook(psp, recurring, (env.PIX_WEBHOOK_BASE_URL ?? s.publicUrl ?? url).replace(/\/+$/, ''), webhookSecret);
  pix.startReconciler(options.reconcileIntervalMs ?? env.PIX_RECONCILE_INTERVAL_MS);
  if (recurring?.enabled) recurring.start(options.reconcileIntervalMs ?? env.PIX_RECONCILE_INTERVAL_MS);
  // `catraca pix recurring run`: this process holds the PSP session, so it runs the pass and answers
  const runSub =
    recurring && nc
      ? nc.subscribe(subjects.pixRecurringRun, {
          callback: (err, msg) => {
            if (err) return void log.error('catraca pix recurring run: subscription refused', { err });
            void answerRecurringRun(recurring, msg);
          },
        })
      : null;
  const purge = periodicCleanup(
    db,
    { webhookRetentionDays: env.PIX_WEBHOOK_RETENTION_DAYS, unverifiedDays: env.PORTAL_UNVERIFIED_SIGNUP_DAYS },
    options.cleanupIntervalMs ?? CLEANUP_INTERVAL_MS,
  );
  if (!mailer.configured) log.error('SMTP_URL is not set: the portal cannot send e-mail, so sign-up is closed (existing accounts keep working)');
  const notifier =
    options.notifier && nc
      ? await startNotifier({ ...notifierOptions(env, devMode, options.notifier), db, nc, mailer, pix, site, resolve: options.notifyResolve })
      : null;
  log.info('portal listening', { url, provider: psp.name, dev_mode: devMode, trusted_proxies: s.proxies.join(',') || null });

  return {
    url,
    app,
    pix,
    recurring,
    simulator,
    nfse,
    close: async () => {
      clearInterval(purge);
      runSub?.unsubscribe();
      await nfse?.stop();
      await notifier?.stop();
      await pix.stop();
      await recurring?.stop();
      if (!options.mailer) mailer.close();
      await closeServer(server);
      if (simulator) await simulator.close();
    },
  };
}

/** What the options and the configuration say about the portal's HTTP side (options first). */
function portalSettings(options: StartPortalOptions, env: PortalEnv) {
  if (env.PORTAL_TRUST_PROXY) log.warn('PORTAL_TRUST_PROXY is deprecated: it trusts a proxy on this host only (127.0.0.0/8, ::1); set PORTAL_TRUSTED_PROXIES');
  return {
    gatewayUrl: options.gatewayUrl ?? env.GATEWAY_PUBLIC_URL,
    proxies: options.trustedProxies === true ? LOOPBACK_PROXIES : (options.trustedProxies ?? trustedProxies(env)),
    signupLimit: options.signupLimitPerHour ?? env.PORTAL_SIGNUP_LIMIT_PER_HOUR,
    secureMode: options.secureCookies ?? (env.PORTAL_SECURE_COOKIES === 'auto' ? ('auto' as const) : env.PORTAL_SECURE_COOKIES === 'true'),
    publicUrl: options.publicUrl ?? env.PORTAL_PUBLIC_URL,
    listenHost: options.host ?? '127.0.0.1',
  };
}

/** The notifier's settings: the configuration's, then a test's (private addresses only in dev mode unless it says). */
function notifierOptions(env: PortalEnv, devMode: boolean, given: true | NotifierSettings): NotifierSettings & { allowPrivate: boolean } {
  const test = given === true ? {} : given;
  return { ...notifierSettings(env, devMode), ...test, allowPrivate: test.allowPrivate ?? devMode };
}

/** Stops taking connections; ends the idle ones at once and the rest after 2 s. */
async function closeServer(server: http.Server): Promise<void> {
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
    setTimeout(() => server.closeAllConnections(), 2000).unref();
  });
}

/** The HTTP server of the app, listening; its URL as the portal reaches itself. */
async function listen(app: Hono<AppEnv>, listenHost: string, options: StartPortalOptions): Promise<{ server: http.Server; url: string }> {
  // (overrideGlobalObjects, the default, swaps in node-server's Request and Response: bodyLimit
  // re-wraps a chunked body in a Request, which the global one cannot do with node-server's.)
  const listener = getRequestListener(app.fetch, { errorHandler: (err) => failedRequest(err) });
  const server = http.createServer((req, res) => {
    if (options.onResponse) res.once('finish', () => options.onResponse!(res.statusCode));
    void listener(req, res);
  });
  server.headersTimeout = 20000;
  server.requestTimeout = 30000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, listenHost, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.address === '0.0.0.0' || addr.address === '::' ? '127.0.0.1' : addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;

  return { server, url };
}

/** Tells the PSP where to notify payments; not fatal when it fails (reconciliation still finds them). */
async function registerPixWebhook(psp: PixService['psp'], recurring: RecurringService | null, webhookBase: string, webhookSecret: string): Promise<void> {
  try {
    await psp.registerWebhook(`${webhookBase}/webhooks/pix/${webhookSecret}`);
    log.info('pix webhook registered', { provider: psp.name, base: webhookBase });
  } catch (err) {
    log.error('pix webhook registration failed; payments will be found by reconciliation only', { err, provider: psp.name });
  }
  if (!recurring?.enabled) return;
  try {
    // callbacks come to …/rec and …/cobr
    await recurring.api.registerWebhooks(`${webhookBase}/webhooks/pix/${webhookSecret}`);
    log.info('pix recurrence webhooks registered', { provider: psp.name, base: webhookBase });
  } catch (err) {
    log.error('pix recurrence webhook registration failed; recurrences and their charges will be found by reconciliation only', { err, provider: psp.name });
  }
}

/** Answers one `catraca pix recurring run` request with the pass's outcome (amounts as micro-BRL strings). */
async function answerRecurringRun(recurring: RecurringService, msg: { respond(data?: Uint8Array): boolean; data: Uint8Array }): Promise<void> {
  try {
    if (!recurring.enabled) throw new Error('recurring top-ups are off: set PIX_ACCOUNT_AGENCY, PIX_ACCOUNT_NUMBER and PIX_ACCOUNT_TYPE');
    await recurring.reconcileOnce();
    const r = await recurring.runOnce();
    const out = {
      ok: true,
      checked: r.checked,
      failed: r.failed,
      scheduled: r.scheduled.map((s) => ({
        id_rec: s.idRec,
        tenant_id: s.tenantId,
        due_date: s.dueDate,
        txid: s.txid,
        amount_micros: s.projection.amountMicros === null ? null : String(s.projection.amountMicros),
        projected_micros: String(s.projection.projectedMicros),
        rule: s.projection.rule,
      })),
    };
    msg.respond(Buffer.from(JSON.stringify(out)));
  } catch (err) {
    msg.respond(Buffer.from(JSON.stringify({ ok: false, error: (err as Error).message })));
  }
}

/** Every table a request can add rows to is emptied of what no longer counts (src/portal/cleanup.ts), one pass at a time. */
function periodicCleanup(db: StartPortalOptions['db'], retention: { webhookRetentionDays: number; unverifiedDays: number }, cleanupMs: number): NodeJS.Timeout {
  let cleaning = false;
  const purge = setInterval(
    () => {
      if (cleaning) return;
      cleaning = true;
      cleanUp(db, retention)
        .then((n) => Object.values(n).some((x) => x > 0) && log.info('portal cleanup', { ...n }))
        .catch((err) => log.warn('portal cleanup failed', { err }))
        .finally(() => (cleaning = false));
    },
    cleanupMs || 2 ** 31 - 1,
  );
  purge.unref();
  return purge;
}

/** What a test may set on the notifier (the rest is the portal's). */
export type NotifierSettings = Partial<Omit<NotifierOptions, 'db' | 'nc' | 'mailer' | 'pix' | 'site' | 'resolve'>>;

/** The notifier's settings from the configuration: private addresses only in dev mode. */
function notifierSettings(env: PortalEnv, devMode: boolean): NotifierSettings & { allowPrivate: boolean } {
  return {
    allowPrivate: devMode,
    timeoutMs: env.NOTIFY_WEBHOOK_TIMEOUT_MS,
    maxResponseBytes: env.NOTIFY_WEBHOOK_MAX_RESPONSE_BYTES,
    schedule: parseSchedule(env.NOTIFY_RETRY_SCHEDULE) ?? undefined,
    retentionDays: env.NOTIFY_RETENTION_DAYS,
  };
}

// What @hono/node-server could not make a Request of (a request target or Host header that is no
// URL) is a 400; anything else that escaped the app's own error handler a 500.
const fallback = new Hono()
  .use(secureHeaders(SECURE_HEADERS))
  .all('/400', (c) => send(c, 400, TEXT, 'Bad Request'))
  .all('/500', (c) => send(c, 500, TEXT, 'Internal Server Error'));
function failedRequest(err: unknown): Response | Promise<Response> {
  if (err instanceof RequestError) return fallback.request('/400');
  log.error('portal request failed outside the app', { err });
  return fallback.request('/500');
}
