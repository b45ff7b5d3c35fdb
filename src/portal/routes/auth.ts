import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import { createSession, destroySession, destroySessionToken, logIn, MIN_PASSWORD, SESSION_TTL_MS, SIGNUP_WINDOW_MIN, signUp } from '../auth.ts';
import { linkUsable, resetPassword, verifyEmail } from '../email-links.ts';
import { type MailContext, sendSignupNotice, sendVerification } from '../emails.ts';
import { type AppEnv, clearPortalCookie, type Ctx, SESSION_COOKIE, setPortalCookie } from '../http.ts';
import { one, redirect } from '../../web/http.ts';
import { throttleKey } from '../../auth/client-address.ts';
import type { Renderer } from '../render.ts';
import { can } from '../authorize.ts';
import { afterRevocation } from '../revocation.ts';
import { checkEmailPage, loginPage, resetPage, signupPage } from '../views/auth.ts';
import { messagePage } from '../views/layout.ts';

// Sign-up, sign-in, sign-out, and the links sent by e-mail: the pages a browser without a session may see.

const log = createLogger('portal');

export interface AuthDeps extends MailContext {
  db: pg.Pool;
  nc: NatsConnection | null;
  /** Sign-up attempts per client address per hour. */
  signupLimit: number;
  devMode: boolean;
}

export function authRoutes(d: AuthDeps, r: Renderer): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.on(['GET', 'POST'], '/', can('public'), (c) => redirect(c, c.var.session ? '/dashboard' : '/login'));

  signUpRoutes(app, d, r);
  signInRoutes(app, d, r);
  return app;
}

/** Sign-up: the form, and the page that says to check the e-mail (the same for a new address and a taken one). */
function signUpRoutes(app: Hono<AppEnv>, d: AuthDeps, r: Renderer): void {
  const { db } = d;
  const signupClosed = (c: Ctx) =>
    r.page(c, 503, c.var.t('auth.signup_title'), (vc) => messagePage(vc, c.var.t('auth.signup_title'), c.var.t('auth.signup_closed')));

  app.get('/signup', can('public'), (c) => {
    if (c.var.session) return redirect(c, '/dashboard');
    if (!d.mailer.configured) return signupClosed(c);
    return r.page(c, 200, c.var.t('auth.signup_title'), (vc) => signupPage(vc));
  });
  app.post('/signup', can('public'), async (c) => {
    const { t, form, ip } = c.var;
    if (!d.mailer.configured) return signupClosed(c);
    const res = await signUp(db, {
      email: one(form, 'email'),
      password: one(form, 'password'),
      orgName: one(form, 'org'),
      ip: throttleKey(ip),
      maxPerIp: d.signupLimit,
    });
    if (!res.ok) {
      if (res.error === 'rate_limited') log.warn('sign-up rate limited', { ip });
      const error = res.error === 'rate_limited' ? t('auth.signup_rate_limited', { minutes: SIGNUP_WINDOW_MIN }) : t(`auth.${res.error}`);
      return r.page(
        c,
        res.error === 'rate_limited' ? 429 : 400,
        t('auth.signup_title'),
        (vc) => signupPage(vc, { email: one(form, 'email'), org: one(form, 'org') }),
        {
          error,
        },
      );
    }
    // The same page either way: a new account gets its verification link, an existing one a notice.
    if (res.created) {
      log.info('user signed up', { user: res.user.id, tenant: res.user.tenant_id });
      await sendVerification(d, t, res.user);
    } else {
      log.info('sign-up with the e-mail of an existing account: its owner is told', { user: res.user.id });
      await sendSignupNotice(d, t, res.user);
    }
    return r.page(c, 200, t('auth.check_email_title'), (vc) => checkEmailPage(vc, { email: res.user.email, devMail: d.devMode }));
  });
}

/** Sign-in (a new session) and sign-out. */
function signInRoutes(app: Hono<AppEnv>, d: AuthDeps, r: Renderer): void {
  const { db } = d;

  // A new session id at every sign-in: whatever session this browser carried (ours, another
  // account's, or one planted by someone else) is destroyed, never upgraded.
  async function startSession(c: Ctx, userId: string) {
    await destroySessionToken(db, getCookie(c, SESSION_COOKIE));
    const s = await createSession(db, userId);
    setPortalCookie(c, SESSION_COOKIE, s.token, Math.floor(SESSION_TTL_MS / 1000));
    return redirect(c, '/dashboard');
  }
  app.get('/login', can('public'), (c) => {
    if (c.var.session) return redirect(c, '/dashboard');
    const q = c.var.url.searchParams;
    const flash = q.has('bye')
      ? c.var.t('auth.logged_out')
      : q.has('reset')
        ? c.var.t('auth.reset_done')
        : q.has('left')
          ? c.var.t('auth.left')
          : q.has('role')
            ? c.var.t('auth.role_changed')
            : null;
    return r.page(c, 200, c.var.t('auth.login_title'), (vc) => loginPage(vc), { flash });
  });
  app.post('/login', can('public'), async (c) => {
    const { t, form, ip } = c.var;
    const res = await logIn(db, { email: one(form, 'email'), password: one(form, 'password'), ip: throttleKey(ip) });
    if (res.ok) return startSession(c, res.user.id);
    if (res.error === 'rate_limited') log.warn('login rate limited', { ip });
    const error =
      res.error === 'bad_credentials'
        ? t('auth.bad_credentials')
        : res.seconds !== undefined
          ? res.seconds === 1
            ? t('error.account_backoff_one')
            : t('error.account_backoff', { seconds: res.seconds })
          : t('error.rate_limited', { minutes: res.minutes ?? 15 });
    if (res.error === 'rate_limited') c.header('retry-after', String(res.seconds ?? (res.minutes ?? 15) * 60));
    return r.page(c, res.error === 'rate_limited' ? 429 : 401, t('auth.login_title'), (vc) => loginPage(vc, { email: one(form, 'email') }), { error });
  });

  app.post('/logout', can('public'), async (c) => {
    if (c.var.session) await destroySession(db, c.var.session.idHash);
    clearPortalCookie(c, SESSION_COOKIE);
    return redirect(c, '/login?bye=1');
  });
}

/** The links of the e-mails: a verification link verifies when opened; a reset link shows a form. */
export function linkRoutes(d: AuthDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  const linkInvalid = (c: Ctx) =>
    r.page(c, 400, c.var.t('auth.link_invalid_title'), (vc) =>
      messagePage(vc, c.var.t('auth.link_invalid_title'), c.var.t('auth.link_invalid'), { href: '/login', label: c.var.t('auth.login_button') }),
    );
  app.get('/verify', can('public'), async (c) => {
    const { t, session } = c.var;
    if (!(await verifyEmail(db, c.var.url.searchParams.get('token') ?? ''))) return linkInvalid(c);
    log.info('e-mail verified', { user: session?.user.id });
    const next = session ? { href: '/topup', label: t('nav.topup') } : { href: '/login', label: t('auth.login_button') };
    return r.page(c, 200, t('auth.verified_title'), (vc) => messagePage(vc, t('auth.verified_title'), t('auth.verified'), next));
  });
  app.get('/reset', can('public'), async (c) => {
    const token = c.var.url.searchParams.get('token') ?? '';
    if (!(await linkUsable(db, token, 'reset'))) return linkInvalid(c);
    return r.page(c, 200, c.var.t('auth.reset_title'), (vc) => resetPage(vc, token));
  });
  app.post('/reset', can('public'), async (c) => {
    const { t, form } = c.var;
    const token = one(form, 'token');
    const password = one(form, 'password');
    if (password.length < MIN_PASSWORD || password.length > 1024)
      return r.page(c, 400, t('auth.reset_title'), (vc) => resetPage(vc, token), { error: t('auth.weak_password') });
    const done = await resetPassword(db, token, password);
    if (!done) return linkInvalid(c);
    log.info('password reset by e-mail link', { user: done.userId, tenant: done.tenantId, revoked_keys: done.revokedKeys.length });
    await afterRevocation(d, done.revokedKeys, done.events, log);
    clearPortalCookie(c, SESSION_COOKIE);
    return redirect(c, '/login?reset=1');
  });
  return app;
}
