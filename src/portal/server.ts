import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { NatsConnection } from 'nats';
import { subjects } from '../bus/subjects.ts';
import { encode } from '../bus/messages.ts';
import { parseExpiry, parseRateLimit } from '../auth/key-options.ts';
import { createApiKey, getKey, keyUsageWindows, listKeys, revokeKey, type LimitReset } from '../db/keys.ts';
import { listModels } from '../db/models.ts';
import { getTenant } from '../db/tenants.ts';
import { createLogger } from '../log.ts';
import { BcbPixAdapter } from '../pix/bcb.ts';
import { qrDataUrl } from '../pix/brcode.ts';
import { parseUserAmountInput } from '../pix/amount.ts';
import { CENTAVO_MICROS, MAX_OPEN_CHARGES, TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../pix/limits.ts';
import { PixService, TopUpError } from '../pix/service.ts';
import { deleteSettings, getOrCreateSecret, setSetting, SETTINGS } from '../pix/settings.ts';
import { startPixSimulator, type PixSimulator } from '../pix/simulator/server.ts';
import { paySimulatedCharge } from '../pix/simulator/pay.ts';
import type { PspAdapter } from '../pix/types.ts';
import { createSession, destroySession, destroySessionToken, loadSession, logIn, LOGIN_WINDOW_MIN, purgeExpired, SESSION_TTL_MS, SIGNUP_WINDOW_MIN, signUp, tokensEqual, type Session } from './auth.ts';
import { loadPortalEnv, resolvePortalSetup, SIMULATOR_PIX_KEY, type PortalEnv } from './config.ts';
import { putFlash, purgeFlash, takeFlash } from './flash.ts';
import { money } from './format.ts';
import type { SafeHtml } from './html.ts';
import { parseLang, translator, type Lang, type T } from './i18n/index.ts';
import { dailySpend, ledgerPage, spendByKey, spendByModel } from './usage.ts';
import * as V from './views.ts';

const log = createLogger('portal');
const STATIC_DIR = join(dirname(fileURLToPath(import.meta.url)), 'static');
const STATIC: Record<string, { type: string; body: Buffer }> = {
  '/static/portal.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.js')) },
  '/static/portal.css': { type: 'text/css; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.css')) },
};
const SESSION_COOKIE = 'catraca_session';
const PRE_CSRF_COOKIE = 'catraca_csrf';
const LANG_COOKIE = 'catraca_lang';
const MAX_FORM_BYTES = 64 * 1024;

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

type Form = Record<string, string | string[]>;
/** The one-time flash of a key created in the portal. */
type CreatedKeyFlash = { key: string; id: string; label: string };

interface Ctx {
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

function parseCookies(h: string | undefined): Record<string, string> {
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

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | null> {
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
  const parts = (Array.isArray(h) ? h.join(',') : (h ?? '')).split(',').map((p) => p.trim()).filter(Boolean);
  return (parts[parts.length - 1] ?? '').slice(0, 100);
}

/** decodeURIComponent, or null for a malformed escape (`%zz`, a lone `%`, a cut UTF-8 sequence). */
function safeDecode(s: string): string | null {
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
function parseForm(body: Buffer): Form | null {
  const out: Form = {};
  for (const [k, v] of new URLSearchParams(body.toString('utf8'))) {
    if (k.includes('\u0000') || v.includes('\u0000')) return null;
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}
const one = (f: Form, k: string) => {
  const v = f[k];
  return Array.isArray(v) ? v[0] ?? '' : v ?? '';
};

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
  const webhookSecret = options.webhookSecret ?? env.PIX_WEBHOOK_SECRET ?? (await getOrCreateSecret(db, SETTINGS.webhookSecret));

  let simulator: PixSimulator | null = null;
  let psp: PspAdapter;
  if (options.pixAdapter) psp = options.pixAdapter;
  else if (setup.provider === 'simulator') {
    const clientId = 'catraca-portal';
    await setSetting(db, SETTINGS.simulatorClientId, clientId);
    const clientSecret = await getOrCreateSecret(db, SETTINGS.simulatorClientSecret);
    simulator = await startPixSimulator({ host: env.PIX_SIM_HOST, port: env.PIX_SIM_PORT, clientId, clientSecret, merchantName: env.PIX_MERCHANT_NAME, merchantCity: env.PIX_MERCHANT_CITY });
    await setSetting(db, SETTINGS.simulatorUrl, simulator.url);
    psp = new BcbPixAdapter({ name: 'simulator', baseUrl: simulator.url, clientId, clientSecret, chave: env.PIX_KEY ?? SIMULATOR_PIX_KEY, webhookSecret, merchantName: env.PIX_MERCHANT_NAME, merchantCity: env.PIX_MERCHANT_CITY });
  } else if (setup.provider === 'bcb') {
    // A real PSP: forget any simulator an earlier development portal recorded, so that
    // `catraca pix pay` has nothing to talk to.
    await deleteSettings(db, [SETTINGS.simulatorUrl, SETTINGS.simulatorClientId, SETTINGS.simulatorClientSecret]);
    const b = setup.bcb;
    psp = new BcbPixAdapter({
      baseUrl: b.apiUrl,
      oauthUrl: b.oauthUrl,
      clientId: b.clientId,
      clientSecret: b.clientSecret,
      chave: b.chave,
      webhookSecret,
      merchantName: env.PIX_MERCHANT_NAME,
      merchantCity: env.PIX_MERCHANT_CITY,
      tls: { cert: readFileSync(b.certFile), key: readFileSync(b.keyFile), ca: b.caFile ? readFileSync(b.caFile) : undefined },
    });
  } else throw new Error('unreachable: a custom setup comes with options.pixAdapter');
  const pix = new PixService(db, psp, { expiresInS: options.chargeExpiryS ?? env.PIX_CHARGE_EXPIRY_S });

  // ---- rendering helpers -------------------------------------------------------------------
  const securityHeaders = {
    'content-security-policy': "default-src 'self'; img-src 'self' data:; script-src 'self'; style-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'same-origin',
  };
  const cookie = (ctx: Ctx, name: string, value: string, maxAgeS: number, httpOnly = true) =>
    `${name}=${encodeURIComponent(value)}; Path=/; Max-Age=${maxAgeS}; SameSite=Lax${httpOnly ? '; HttpOnly' : ''}${ctx.secure ? '; Secure' : ''}`;
  const pendingCookies = new WeakMap<http.ServerResponse, string[]>();
  const addCookie = (ctx: Ctx, c: string) => pendingCookies.set(ctx.res, [...(pendingCookies.get(ctx.res) ?? []), c]);

  const send = (ctx: Ctx, status: number, type: string, body: string | Buffer, extra: Record<string, string> = {}) => {
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
  const redirect = (ctx: Ctx, to: string) => send(ctx, 303, 'text/plain; charset=utf-8', '', { location: to });
  const json = (ctx: Ctx, status: number, body: unknown) => send(ctx, status, 'application/json; charset=utf-8', JSON.stringify(body));

  async function viewCtx(ctx: Ctx): Promise<V.ViewCtx> {
    const vc: V.ViewCtx = { t: ctx.t, lang: ctx.lang, path: ctx.url.pathname + ctx.url.search, csrf: ctx.session?.csrf ?? ctx.preCsrf };
    if (ctx.session) {
      vc.email = ctx.session.user.email;
      vc.balance = (await getTenant(db, ctx.session.user.tenant_id))?.balance_micros ?? 0n;
    }
    return vc;
  }
  async function page(ctx: Ctx, status: number, title: string, body: (vc: V.ViewCtx) => SafeHtml, o: { flash?: string | null; error?: string | null } = {}) {
    const vc = await viewCtx(ctx);
    send(ctx, status, 'text/html; charset=utf-8', V.layout(vc, title, body(vc), o));
  }

  // ---- handlers ----------------------------------------------------------------------------
  async function handleWebhook(ctx: Ctx, secret: string) {
    const body = await readBody(ctx.req, 256 * 1024);
    if (!body) return json(ctx, 413, { error: 'too large' });
    const r = await pix.handleWebhook({ secret, headers: ctx.req.headers, rawBody: body, remoteAddr: ctx.ip });
    json(ctx, r.status, r.body);
  }

  async function keysView(ctx: Ctx, status: number, extra: { created?: CreatedKeyFlash | null; form?: Form; error?: string | null; flash?: string | null } = {}) {
    const tenantId = ctx.session!.user.tenant_id;
    const keys = await listKeys(db, tenantId);
    const withUsage = await Promise.all(
      keys.map(async (k) => {
        const w = k.limit_reset ? await keyUsageWindows(db, k.id) : null;
        return { ...k, windowUsage: w ? w[k.limit_reset!] : 0n };
      }),
    );
    const models = await listModels(db);
    await page(ctx, status, ctx.t('keys.title'), (vc) => V.keysPage(vc, { keys: withUsage, models, created: extra.created, form: extra.form }), { error: extra.error, flash: extra.flash });
  }

  /** The message for a refused amount: thousands separators get their own (see src/billing/amount-input.ts). */
  function amountError(ctx: Ctx, r: ReturnType<typeof parseUserAmountInput>, text: string, generic: 'topup.bad_amount' | 'keys.bad_limit'): string {
    if (!r.ok && (r.error === 'thousands_separator' || r.error === 'ambiguous')) return ctx.t('amount.no_thousands', { value: text.trim().slice(0, 40) });
    return ctx.t(generic);
  }

  async function createKey(ctx: Ctx, f: Form) {
    const tenantId = ctx.session!.user.tenant_id;
    const label = one(f, 'label').trim();
    if (!label || label.length > 100) return keysView(ctx, 400, { form: f, error: ctx.t('keys.bad_label') });
    let models: string[] | null = null;
    if (one(f, 'scope') === 'some') {
      const picked = [...new Set((Array.isArray(f.models) ? f.models : f.models ? [f.models] : []).map((m) => m.trim()).filter(Boolean))];
      if (picked.length === 0) return keysView(ctx, 400, { form: f, error: ctx.t('keys.no_models_picked') });
      const known = new Set((await listModels(db)).map((m) => m.id));
      const unknown = picked.find((m) => !known.has(m));
      if (unknown) return keysView(ctx, 400, { form: f, error: ctx.t('keys.unknown_model', { model: unknown }) });
      models = picked;
    }
    let limitMicros: bigint | null = null;
    const limitText = one(f, 'limit').trim();
    if (limitText) {
      const parsed = parseUserAmountInput(limitText);
      if (!parsed.ok || parsed.micros % CENTAVO_MICROS !== 0n) return keysView(ctx, 400, { form: f, error: amountError(ctx, parsed, limitText, 'keys.bad_limit') });
      limitMicros = parsed.micros;
    }
    const resetText = one(f, 'limit_reset');
    const limitReset: LimitReset | null = limitMicros !== null && ['daily', 'weekly', 'monthly'].includes(resetText) ? (resetText as LimitReset) : null;
    // Rate limit: N requests per second/minute/hour/day (enforced by catraca_admit across front doors).
    let rate: { requests: number; intervalS: number } | null = null;
    const rateText = one(f, 'rate_requests').trim();
    if (rateText) {
      const unit = one(f, 'rate_interval') || 'm';
      rate = /^\d{1,7}$/.test(rateText) && (V.RATE_INTERVALS as readonly string[]).includes(unit) ? parseRateLimit(`${Number(rateText)}/1${unit}`) : null;
      if (!rate) return keysView(ctx, 400, { form: f, error: ctx.t('keys.bad_rate_limit') });
    }
    // Expiry: one of the offered durations from now (the gateway refuses the key after it).
    let expiresAt: Date | null = null;
    const expiresText = one(f, 'expires');
    if (expiresText) {
      const r = (V.EXPIRY_CHOICES as readonly string[]).includes(expiresText) ? parseExpiry(expiresText) : null;
      if (!r?.ok) return keysView(ctx, 400, { form: f, error: ctx.t('keys.bad_expiry') });
      expiresAt = r.at;
    }
    const created = await createApiKey(db, {
      tenantId,
      label,
      models,
      limitMicros,
      limitReset,
      rateLimitRequests: rate?.requests ?? null,
      rateLimitIntervalS: rate?.intervalS ?? null,
      expiresAt,
    });
    log.info('api key created', { tenant: tenantId, key_id: created.record.id, models: models ?? '*', expires_at: expiresAt, rate_limit: rateText ? `${rate!.requests}/${rate!.intervalS}s` : null });
    // Post/Redirect/Get: the key goes into a one-time flash of this session (encrypted under the
    // session's cookie token) and the GET it redirects to shows it once and deletes it. A refresh
    // re-sends only that GET: no second key, and the key is not shown again. Never logged.
    const flashId = await putFlash(db, {
      sessionToken: ctx.cookies[SESSION_COOKIE],
      sessionId: ctx.session!.idHash,
      value: { key: created.key, id: created.record.id, label: created.record.label } satisfies CreatedKeyFlash,
    });
    redirect(ctx, `/keys?created=${flashId}`);
  }

  async function keysPageGet(ctx: Ctx) {
    const flashId = ctx.url.searchParams.get('created');
    if (flashId === null) return keysView(ctx, 200);
    const created = await takeFlash<CreatedKeyFlash>(db, { sessionToken: ctx.cookies[SESSION_COOKIE], sessionId: ctx.session!.idHash, id: flashId });
    return created ? keysView(ctx, 200, { created }) : keysView(ctx, 200, { flash: ctx.t('keys.already_shown') });
  }

  async function revoke(ctx: Ctx, keyId: string) {
    const tenantId = ctx.session!.user.tenant_id;
    const ok = await revokeKey(db, keyId, tenantId);
    if (!ok) return notFound(ctx);
    if (options.nc) {
      options.nc.publish(subjects.keyInvalidated, encode({ key_id: keyId }));
      await options.nc.flush().catch((err) => log.warn('nats flush after revocation failed', { err }));
    }
    log.info('api key revoked', { tenant: tenantId, key_id: keyId });
    await keysView(ctx, 200, { flash: ctx.t('keys.revoked_ok') });
  }

  async function createTopUp(ctx: Ctx, f: Form) {
    const tenantId = ctx.session!.user.tenant_id;
    const amountText = one(f, 'amount');
    const parsed = parseUserAmountInput(amountText);
    const fail = async (status: number, error: string) =>
      page(ctx, status, ctx.t('topup.title'), (vc) => V.topupPage(vc, [], { amount: amountText }), { error });
    const lim = { min: money(ctx.lang, TOPUP_MIN_MICROS), max: money(ctx.lang, TOPUP_MAX_MICROS) };
    if (!parsed.ok || parsed.micros % CENTAVO_MICROS !== 0n) return fail(400, amountError(ctx, parsed, amountText, 'topup.bad_amount'));
    const amount = parsed.micros;
    try {
      const ch = await pix.createTopUp(tenantId, amount);
      redirect(ctx, `/topup/${ch.txid}`);
    } catch (err) {
      if (err instanceof TopUpError && err.code === 'too_many_open') return fail(429, ctx.t('topup.too_many_open', { max: MAX_OPEN_CHARGES }));
      if (err instanceof TopUpError) return fail(400, err.code === 'below_min' ? ctx.t('topup.below_min', lim) : err.code === 'above_max' ? ctx.t('topup.above_max', lim) : ctx.t('topup.bad_amount'));
      log.error('pix charge creation failed', { err, tenant: tenantId });
      return fail(502, ctx.t('topup.psp_error'));
    }
  }

  async function chargeStatus(ctx: Ctx, txid: string) {
    const tenantId = ctx.session!.user.tenant_id;
    let ch = await pix.getCharge(txid, tenantId);
    if (!ch) return json(ctx, 404, { error: 'not found' });
    if (ch.status === 'ATIVA' && ch.expires_at.getTime() < Date.now()) {
      await pix.reconcileCharge(txid).catch((err) => log.warn('reconcile on view failed', { err, txid }));
      ch = (await pix.getCharge(txid, tenantId))!;
    }
    const balance = (await getTenant(db, tenantId))?.balance_micros ?? 0n;
    json(ctx, 200, {
      txid: ch.txid,
      status: ch.status,
      amount: ch.amount_micros.toString(),
      expires_at: ch.expires_at.toISOString(),
      paid_at: ch.paid_at?.toISOString() ?? null,
      balance_micros: balance.toString(),
      balance_display: money(ctx.lang, balance),
    });
  }

  const notFound = (ctx: Ctx) => page(ctx, 404, ctx.t('error.not_found'), (vc) => V.messagePage(vc, '404', ctx.t('error.not_found')));

  async function route(ctx: Ctx): Promise<void> {
    const { req, url } = ctx;
    const method = req.method ?? 'GET';
    const path = url.pathname;
    let m: RegExpExecArray | null;

    if (method === 'GET' && STATIC[path]) {
      return send(ctx, 200, STATIC[path].type, STATIC[path].body, { 'cache-control': 'public, max-age=300' });
    }
    if (path === '/healthz') return json(ctx, 200, { ok: true });
    // PSP callbacks: the secret is part of the URL we registered; the BCB standard appends /pix.
    if ((m = /^\/webhooks\/pix\/([^/]+)(?:\/pix)?\/?$/.exec(path))) {
      if (method !== 'POST') return json(ctx, 405, { error: 'method not allowed' });
      // a malformed %-escape cannot be our secret: refused like any wrong one (was a URIError → 500)
      return handleWebhook(ctx, safeDecode(m[1]) ?? '');
    }

    let form: Form = {};
    if (method === 'POST') {
      const body = await readBody(req, MAX_FORM_BYTES);
      if (!body) return send(ctx, 413, 'text/plain; charset=utf-8', 'Payload Too Large');
      const parsed = parseForm(body);
      if (!parsed) return page(ctx, 400, ctx.t('error.bad_form_title'), (vc) => V.messagePage(vc, '400', ctx.t('error.bad_form')));
      form = parsed;
      // CSRF: same-origin check when the browser says where it comes from, and the synchronizer
      // token (session secret; before sign-in, the double-submit cookie) on every form post.
      const origin = req.headers.origin;
      // (`Origin: null` comes from privacy settings; the token below still decides.)
      let originOk = !origin || origin === 'null';
      if (!originOk) {
        try {
          originOk = new URL(origin!).host === req.headers.host;
        } catch {
          originOk = false;
        }
      }
      const expected = ctx.session ? ctx.session.csrf : ctx.cookies[PRE_CSRF_COOKIE];
      if (!originOk || !tokensEqual(one(form, '_csrf'), expected)) {
        log.warn('csrf check failed', { path, has_session: !!ctx.session, origin_ok: originOk });
        return page(ctx, 403, 'CSRF', (vc) => V.messagePage(vc, '403', ctx.t('error.csrf')));
      }
    } else if (method !== 'GET' && method !== 'HEAD') {
      return send(ctx, 405, 'text/plain; charset=utf-8', 'Method Not Allowed', { allow: 'GET, POST' });
    }

    if (path === '/') return redirect(ctx, ctx.session ? '/dashboard' : '/login');
    if (path === '/signup') {
      if (method === 'GET') return ctx.session ? redirect(ctx, '/dashboard') : page(ctx, 200, ctx.t('auth.signup_title'), (vc) => V.signupPage(vc));
      const r = await signUp(db, { email: one(form, 'email'), password: one(form, 'password'), orgName: one(form, 'org'), ip: ctx.ip, maxPerIp: signupLimit });
      if (!r.ok) {
        if (r.error === 'rate_limited') {
          log.warn('sign-up rate limited', { ip: ctx.ip });
          return page(ctx, 429, ctx.t('auth.signup_title'), (vc) => V.signupPage(vc, { email: one(form, 'email'), org: one(form, 'org') }), { error: ctx.t('auth.signup_rate_limited', { minutes: SIGNUP_WINDOW_MIN }) });
        }
        return page(ctx, r.error === 'email_taken' ? 409 : 400, ctx.t('auth.signup_title'), (vc) => V.signupPage(vc, { email: one(form, 'email'), org: one(form, 'org') }), { error: ctx.t(`auth.${r.error}`) });
      }
      log.info('user signed up', { user: r.user.id, tenant: r.user.tenant_id });
      return startSession(ctx, r.user.id);
    }
    if (path === '/login') {
      if (method === 'GET')
        return ctx.session
          ? redirect(ctx, '/dashboard')
          : page(ctx, 200, ctx.t('auth.login_title'), (vc) => V.loginPage(vc), { flash: url.searchParams.has('bye') ? ctx.t('auth.logged_out') : null });
      const r = await logIn(db, { email: one(form, 'email'), password: one(form, 'password'), ip: ctx.ip });
      if (!r.ok) {
        if (r.error === 'rate_limited') log.warn('login rate limited', { ip: ctx.ip });
        return page(ctx, r.error === 'rate_limited' ? 429 : 401, ctx.t('auth.login_title'), (vc) => V.loginPage(vc, { email: one(form, 'email') }), {
          error: r.error === 'rate_limited' ? ctx.t('error.rate_limited', { minutes: LOGIN_WINDOW_MIN }) : ctx.t('auth.bad_credentials'),
        });
      }
      return startSession(ctx, r.user.id);
    }
    if (path === '/logout' && method === 'POST') {
      if (ctx.session) await destroySession(db, ctx.session.idHash);
      addCookie(ctx, cookie(ctx, SESSION_COOKIE, '', 0));
      return redirect(ctx, '/login?bye=1');
    }

    // ---- everything below needs a session --------------------------------------------------
    if (!ctx.session) {
      if (path.endsWith('/status')) return json(ctx, 401, { error: 'unauthorized' });
      return redirect(ctx, '/login');
    }
    const tenantId = ctx.session.user.tenant_id;

    if (path === '/dashboard' && method === 'GET') {
      const [tenant, days, byModel, byKey] = await Promise.all([getTenant(db, tenantId), dailySpend(db, tenantId), spendByModel(db, tenantId), spendByKey(db, tenantId)]);
      return page(ctx, 200, ctx.t('dash.title'), (vc) => V.dashboardPage(vc, { balance: tenant!.balance_micros, held: tenant!.held_micros, days, byModel, byKey, gatewayUrl }));
    }
    if (path === '/topup') {
      if (method === 'POST') return createTopUp(ctx, form);
      const charges = await pix.listCharges(tenantId);
      return page(ctx, 200, ctx.t('topup.title'), (vc) => V.topupPage(vc, charges));
    }
    if ((m = /^\/topup\/([a-zA-Z0-9]{26,35})(\/status|\/simulate)?$/.exec(path))) {
      const txid = m[1];
      if (m[2] === '/status' && method === 'GET') return chargeStatus(ctx, txid);
      if (m[2] === '/simulate' && method === 'POST') {
        if (!devMode) return notFound(ctx);
        const ch = await pix.getCharge(txid, tenantId);
        if (!ch) return notFound(ctx);
        const r = await paySimulatedCharge(db, { txid, simulatorUrl: simulator?.url });
        if (!r.ok) log.warn('simulated payment failed', { txid, status: r.status, error: r.error });
        return redirect(ctx, `/topup/${txid}`);
      }
      if (m[2] || method !== 'GET') return notFound(ctx);
      const ch = await pix.getCharge(txid, tenantId);
      if (!ch) return notFound(ctx);
      const qr = await qrDataUrl(ch.br_code);
      const balance = (await getTenant(db, tenantId))?.balance_micros ?? 0n;
      return page(ctx, 200, ctx.t('topup.title'), (vc) => V.chargePage(vc, ch, qr, { devMode, balance }));
    }
    if (path === '/keys') {
      if (method === 'POST') return createKey(ctx, form);
      return keysPageGet(ctx);
    }
    if ((m = /^\/keys\/([A-Za-z0-9_-]{1,64})\/revoke$/.exec(path))) {
      if (method === 'POST') return revoke(ctx, m[1]);
      const k = await getKey(db, m[1], tenantId);
      if (!k || k.revoked_at) return notFound(ctx);
      return page(ctx, 200, ctx.t('keys.revoke'), (vc) => V.revokeConfirmPage(vc, k));
    }
    if (path === '/ledger' && method === 'GET') {
      const p = Math.min(Math.max(1, Number.parseInt(url.searchParams.get('page') ?? '1', 10) || 1), 100000);
      const r = await ledgerPage(db, tenantId, p);
      return page(ctx, 200, ctx.t('ledger.title'), (vc) => V.ledgerPage(vc, r.rows, p, r.hasMore));
    }
    if (path === '/models' && method === 'GET') {
      const models = await listModels(db);
      return page(ctx, 200, ctx.t('models.title'), (vc) => V.modelsPage(vc, models));
    }
    return notFound(ctx);
  }

  async function startSession(ctx: Ctx, userId: string) {
    // A new session id at every sign-in: whatever session this browser carried (ours, another
    // account's, or one planted by someone else) is destroyed, never upgraded.
    await destroySessionToken(db, ctx.cookies[SESSION_COOKIE]);
    const s = await createSession(db, userId);
    addCookie(ctx, cookie(ctx, SESSION_COOKIE, s.token, Math.floor(SESSION_TTL_MS / 1000)));
    redirect(ctx, '/dashboard');
  }

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
      const forwardedProto = trustProxy ? String(req.headers['x-forwarded-proto'] ?? '').split(',')[0].trim() : '';
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
        log.error('portal request failed', { err, method: req.method, path: url.pathname.startsWith('/webhooks/') ? '/webhooks/pix/…' : url.pathname });
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
