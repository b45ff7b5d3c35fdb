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
import { qrDataUrl } from '../pix/brcode.ts';
import { parseUserAmountInput } from '../pix/amount.ts';
import { CENTAVO_MICROS, MAX_OPEN_CHARGES, TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../pix/limits.ts';
import { type PixService, TopUpError } from '../pix/service.ts';
import type { PixSimulator } from '../pix/simulator/server.ts';
import { paySimulatedCharge } from '../pix/simulator/pay.ts';
import { createSession, destroySession, destroySessionToken, logIn, LOGIN_WINDOW_MIN, SESSION_TTL_MS, SIGNUP_WINDOW_MIN, signUp, tokensEqual } from './auth.ts';
import { putFlash, takeFlash } from './flash.ts';
import { money } from './format.ts';
import type { SafeHtml } from './html.ts';
import { dailySpend, ledgerPage, spendByKey, spendByModel } from './usage.ts';
import * as V from './views.ts';

import {
  addCookie,
  cookie,
  type CreatedKeyFlash,
  type Ctx,
  type Form,
  json,
  MAX_FORM_BYTES,
  one,
  parseForm,
  PRE_CSRF_COOKIE,
  readBody,
  redirect,
  safeDecode,
  send,
  SESSION_COOKIE,
} from './http.ts';

// Every page and form of the portal, and the Pix webhook: route(ctx) answers one request.

const log = createLogger('portal');
const STATIC_DIR = join(dirname(fileURLToPath(import.meta.url)), 'static');
const STATIC: Record<string, { type: string; body: Buffer }> = {
  '/static/portal.js': { type: 'text/javascript; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.js')) },
  '/static/portal.css': { type: 'text/css; charset=utf-8', body: readFileSync(join(STATIC_DIR, 'portal.css')) },
};

export interface RouteDeps {
  db: pg.Pool;
  nc: NatsConnection | null;
  pix: PixService;
  simulator: PixSimulator | null;
  devMode: boolean;
  gatewayUrl: string;
  signupLimit: number;
}

export function createRoutes(d: RouteDeps): { route(ctx: Ctx): Promise<void> } {
  const { db, nc, pix, simulator, devMode, gatewayUrl, signupLimit } = d;
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

  async function keysView(
    ctx: Ctx,
    status: number,
    extra: { created?: CreatedKeyFlash | null; form?: Form; error?: string | null; flash?: string | null } = {},
  ) {
    const tenantId = ctx.session!.user.tenant_id;
    const keys = await listKeys(db, tenantId);
    const withUsage = await Promise.all(
      keys.map(async (k) => {
        const w = k.limit_reset ? await keyUsageWindows(db, k.id) : null;
        return { ...k, windowUsage: w ? w[k.limit_reset!] : 0n };
      }),
    );
    const models = await listModels(db);
    await page(ctx, status, ctx.t('keys.title'), (vc) => V.keysPage(vc, { keys: withUsage, models, created: extra.created, form: extra.form }), {
      error: extra.error,
      flash: extra.flash,
    });
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
      if (!parsed.ok || parsed.micros % CENTAVO_MICROS !== 0n)
        return keysView(ctx, 400, { form: f, error: amountError(ctx, parsed, limitText, 'keys.bad_limit') });
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
    log.info('api key created', {
      tenant: tenantId,
      key_id: created.record.id,
      models: models ?? '*',
      expires_at: expiresAt,
      rate_limit: rateText ? `${rate!.requests}/${rate!.intervalS}s` : null,
    });
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
    if (nc) {
      nc.publish(subjects.keyInvalidated, encode({ key_id: keyId }));
      await nc.flush().catch((err) => log.warn('nats flush after revocation failed', { err }));
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
      if (err instanceof TopUpError)
        return fail(
          400,
          err.code === 'below_min' ? ctx.t('topup.below_min', lim) : err.code === 'above_max' ? ctx.t('topup.above_max', lim) : ctx.t('topup.bad_amount'),
        );
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
          return page(ctx, 429, ctx.t('auth.signup_title'), (vc) => V.signupPage(vc, { email: one(form, 'email'), org: one(form, 'org') }), {
            error: ctx.t('auth.signup_rate_limited', { minutes: SIGNUP_WINDOW_MIN }),
          });
        }
        return page(
          ctx,
          r.error === 'email_taken' ? 409 : 400,
          ctx.t('auth.signup_title'),
          (vc) => V.signupPage(vc, { email: one(form, 'email'), org: one(form, 'org') }),
          { error: ctx.t(`auth.${r.error}`) },
        );
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
      const [tenant, days, byModel, byKey] = await Promise.all([
        getTenant(db, tenantId),
        dailySpend(db, tenantId),
        spendByModel(db, tenantId),
        spendByKey(db, tenantId),
      ]);
      return page(ctx, 200, ctx.t('dash.title'), (vc) =>
        V.dashboardPage(vc, { balance: tenant!.balance_micros, held: tenant!.held_micros, days, byModel, byKey, gatewayUrl }),
      );
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

  return { route };
}
