import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { NatsConnection } from 'nats';
import { classifyDbError } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { PixService } from '../pix/service.ts';
import type { PixSimulator } from '../pix/simulator/server.ts';
import type { PspAdapter } from '../pix/types.ts';
import { loadSession, purgeExpired } from './auth.ts';
import { loadPortalEnv, resolvePortalSetup, type PortalEnv } from './config.ts';
import { purgeFlash } from './flash.ts';
import { parseLang, translator, type Lang } from './i18n/index.ts';

import { connectPsp } from './psp.ts';
import { createRoutes } from './routes.ts';
import {
  addCookie,
  cookie,
  type Ctx,
  LANG_COOKIE,
  lastForwardedFor,
  parseCookies,
  PRE_CSRF_COOKIE,
  requestUrl,
  securityHeaders,
  send,
  SESSION_COOKIE,
} from './http.ts';

export { lastForwardedFor, requestUrl };

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
  trustProxy?: boolean;
  /** Sign-up attempts per client address per hour (default PORTAL_SIGNUP_LIMIT_PER_HOUR, 10). */
  signupLimitPerHour?: number;
  reconcileIntervalMs?: number;
  chargeExpiryS?: number;
  /** PUT /webhook/{chave} at start (default true). */
  registerWebhook?: boolean;
  /** The process's parsed settings (src/config.ts), from main.ts; tests may give a raw `env` instead. */
  config?: PortalEnv;
  env?: Record<string, string | undefined>;
}

export interface Portal {
  url: string;
  pix: PixService;
  simulator: PixSimulator | null;
  close(): Promise<void>;
}

export async function startPortal(options: StartPortalOptions): Promise<Portal> {
  const env: PortalEnv = options.config ?? loadPortalEnv(options.env ?? process.env);
  const db = options.db;
  const gatewayUrl = options.gatewayUrl ?? env.GATEWAY_PUBLIC_URL;
  const trustProxy = options.trustProxy ?? env.PORTAL_TRUST_PROXY;
  const signupLimit = options.signupLimitPerHour ?? env.PORTAL_SIGNUP_LIMIT_PER_HOUR;
  const secureMode = options.secureCookies ?? (env.PORTAL_SECURE_COOKIES === 'auto' ? 'auto' : env.PORTAL_SECURE_COOKIES === 'true');
  const listenHost = options.host ?? '127.0.0.1';
  // Refuses to start (PortalConfigError) without PIX_PROVIDER, with an incomplete bcb setup, or
  // with the simulator / dev mode on anything but a loopback address (src/portal/config.ts).
  const setup = resolvePortalSetup(env, { host: listenHost, adapterGiven: !!options.pixAdapter, devMode: options.devMode });
  const devMode = setup.devMode;
  const { psp, simulator, webhookSecret } = await connectPsp(db, env, setup, options);
  const pix = new PixService(db, psp, { expiresInS: options.chargeExpiryS ?? env.PIX_CHARGE_EXPIRY_S });

  const { route } = createRoutes({ db, nc: options.nc ?? null, pix, simulator, devMode, gatewayUrl, signupLimit });

  const server = http.createServer((req, res) => {
    if (options.onResponse) res.once('finish', () => options.onResponse!(res.statusCode));
    void (async () => {
      const url = requestUrl(req.url);
      if (!url) {
        res.writeHead(400, { ...securityHeaders, 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
        res.end('Bad Request');
        return;
      }
      const cookies = parseCookies(req.headers.cookie);
      const forwardedProto = trustProxy
        ? String(req.headers['x-forwarded-proto'] ?? '')
            .split(',')[0]
            .trim()
        : '';
      const secure = secureMode === 'auto' ? (req.socket as { encrypted?: boolean }).encrypted === true || forwardedProto === 'https' : secureMode;
      // Behind our proxy, the client is the RIGHT-most X-Forwarded-For entry: the one our proxy
      // appended. Entries to its left come from the client and can say anything.
      const ip = (trustProxy ? lastForwardedFor(req.headers['x-forwarded-for']) : '') || req.socket.remoteAddress || 'unknown';
      const queryLang = parseLang(url.searchParams.get('lang'));
      const lang: Lang = queryLang ?? parseLang(cookies[LANG_COOKIE]) ?? 'pt-BR';
      const ctx: Ctx = { req, res, url, lang, t: translator(lang), session: null, cookies, secure, ip, preCsrf: cookies[PRE_CSRF_COOKIE] ?? '' };
      try {
        if (queryLang) addCookie(ctx, cookie(ctx, LANG_COOKIE, queryLang, 365 * 86400));
        if (!url.pathname.startsWith('/webhooks/') && !url.pathname.startsWith('/static/')) {
          ctx.session = await loadSession(db, cookies[SESSION_COOKIE]);
          if (!ctx.session && !/^[A-Za-z0-9_-]{43}$/.test(ctx.preCsrf)) {
            ctx.preCsrf = req.method === 'GET' ? randomBytes(32).toString('base64url') : '';
            if (ctx.preCsrf) addCookie(ctx, cookie(ctx, PRE_CSRF_COOKIE, ctx.preCsrf, 86400));
          }
        }
        await route(ctx);
      } catch (err) {
        const path = url.pathname.startsWith('/webhooks/') ? '/webhooks/pix/…' : url.pathname;
        if (classifyDbError(err)) {
          // PostgreSQL away or too slow: a 503 to come back later (a PSP delivers its webhook again)
          log.warn('portal request refused: database unavailable', { method: req.method, path, code: (err as { code?: string }).code });
          if (!res.headersSent) send(ctx, 503, 'text/plain; charset=utf-8', ctx.t('error.unavailable'), { 'retry-after': '5' });
          else res.end();
          return;
        }
        log.error('portal request failed', { err, method: req.method, path });
        if (!res.headersSent) send(ctx, 500, 'text/plain; charset=utf-8', ctx.t('error.internal'));
        else res.end();
      }
    })().catch((err) => {
      // a throw outside the handler's own try (in its setup) must not become an unhandled rejection,
      // which ends the process
      log.error('portal request failed before routing', { err, method: req.method });
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
      res.end();
    });
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

  const webhookBase = (env.PIX_WEBHOOK_BASE_URL ?? options.publicUrl ?? env.PORTAL_PUBLIC_URL ?? url).replace(/\/+$/, '');
  if (options.registerWebhook !== false) {
    try {
      await psp.registerWebhook(`${webhookBase}/webhooks/pix/${webhookSecret}`);
      log.info('pix webhook registered', { provider: psp.name, base: webhookBase });
    } catch (err) {
      // Not fatal: reconciliation still finds payments; log loudly.
      log.error('pix webhook registration failed; payments will be found by reconciliation only', { err, provider: psp.name });
    }
  }
  pix.startReconciler(options.reconcileIntervalMs ?? env.PIX_RECONCILE_INTERVAL_MS);
  const purge = setInterval(() => void Promise.all([purgeExpired(db), purgeFlash(db)]).catch(() => {}), 600_000);
  purge.unref();
  log.info('portal listening', { url, provider: psp.name, dev_mode: devMode });

  return {
    url,
    pix,
    simulator,
    close: async () => {
      clearInterval(purge);
      await pix.stop();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 2000).unref();
      });
      if (simulator) await simulator.close();
    },
  };
}
