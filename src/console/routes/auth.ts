import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type pg from 'pg';
import { withTransaction } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { one, redirect } from '../../web/http.ts';
import { throttleKey } from '../../auth/client-address.ts';
import { audit, auditThrottled } from '../audit.ts';
import { OPERATOR_LOGIN_WINDOW_MIN, operatorSessions, signIn } from '../auth.ts';
import { clearConsoleCookie, type ConsoleEnv, SESSION_COOKIE, setConsoleCookie } from '../http.ts';
import type { ConsoleRenderer } from '../render.ts';
import { loginPage } from '../views/layout.ts';

// Sign-in (password and a TOTP or recovery code in one form), sign-out. Every attempt that reaches
// the check is audited: a sign-in, a wrong password (or an unknown e-mail), a wrong code; attempts
// the throttle holds, once per address and window (login_throttled).

const log = createLogger('console');
const SESSION_MAX_AGE_S = 12 * 3600;

export function loginRoutes(db: pg.Pool, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  app.get('/login', (c) => {
    if (c.var.operator) return redirect(c, '/tenants');
    const flash = c.var.url.searchParams.has('bye') ? c.var.t('login.bye') : null;
    return r.page(c, 200, c.var.t('login.title'), (vc) => loginPage(vc), { flash });
  });
  app.post('/login', async (c) => {
    const { t, form, ip } = c.var;
    const email = one(form, 'email');
    const res = await signIn(db, { email, password: one(form, 'password'), code: one(form, 'code'), ip: throttleKey(ip) });
    if (res.ok) {
      // a new session id at every sign-in: whatever this browser carried is destroyed, never upgraded;
      // the session and its audit rows in one transaction
      const s = await withTransaction(db, async (tx) => {
        await operatorSessions.destroyToken(tx, getCookie(c, SESSION_COOKIE));
        const made = await operatorSessions.create(tx, res.operator.id, ip);
        await audit(tx, { operatorId: res.operator.id, action: 'login', ip });
        if (res.recoveryCodesLeft !== null)
          await audit(tx, { operatorId: res.operator.id, action: 'recovery_code_used', ip, after: { recovery_codes_left: res.recoveryCodesLeft } });
        return made;
      });
      log.info('operator signed in', { operator: res.operator.id, recovery_code: res.recoveryCodesLeft !== null });
      setConsoleCookie(c, SESSION_COOKIE, s.token, SESSION_MAX_AGE_S);
      return redirect(c, res.recoveryCodesLeft === null ? '/tenants' : `/tenants?codes_left=${res.recoveryCodesLeft}`);
    }
    if (res.error === 'rate_limited') {
      const retryAfterS = res.seconds ?? (res.minutes ?? OPERATOR_LOGIN_WINDOW_MIN) * 60;
      // audited once per address and throttle window, however many requests a flood sends
      const audited = await auditThrottled(db, { ip: throttleKey(ip), email: email.slice(0, 254), retryAfterS });
      log.warn('operator sign-in throttled', { ip, audited });
      c.header('retry-after', String(retryAfterS));
      const error = res.seconds ? t('login.rate_limited_seconds', { seconds: res.seconds }) : t('login.rate_limited', { minutes: OPERATOR_LOGIN_WINDOW_MIN });
      return r.page(c, 429, t('login.title'), (vc) => loginPage(vc, { email }), { error });
    }
    await audit(db, {
      operatorId: res.operator?.id ?? null,
      operatorEmail: res.operator ? null : email.slice(0, 254),
      action: res.failed === 'code' ? 'totp_failed' : 'login_failed',
      ip,
    });
    log.warn('operator sign-in failed', { ip, operator: res.operator?.id ?? null, failed: res.failed });
    return r.page(c, 401, t('login.title'), (vc) => loginPage(vc, { email }), { error: t('login.failed') });
  });
  return app;
}

export function logoutRoutes(db: pg.Pool): Hono<ConsoleEnv> {
  return new Hono<ConsoleEnv>().post('/logout', async (c) => {
    const op = c.var.operator;
    if (op) {
      await operatorSessions.destroy(db, op.idHash);
      await audit(db, { operatorId: op.operator.id, action: 'logout', ip: c.var.ip });
    }
    clearConsoleCookie(c, SESSION_COOKIE);
    return redirect(c, '/login?bye=1');
  });
}
