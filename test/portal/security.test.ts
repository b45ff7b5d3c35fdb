import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from 'nats';
import { connectBus } from '../../src/bus/connect.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { upsertModel } from '../../src/db/models.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { throttleKey } from '../../src/auth/client-address.ts';
import { PortalClient, sinkMailbox } from './client.ts';

// checks as the superuser; the portal connects as its own role (least privilege, test/db/roles.test.ts)
const db = createPool(process.env.DATABASE_URL!, 4);
const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 4);
let nc: NatsConnection;
let portal: Portal;
let sink: MailSink;
/** A client whose sign-ups verify their address through the test's SMTP sink. */
const client = (base: string, headers: Record<string, string> = {}) => new PortalClient(base, headers, { mailbox: sinkMailbox(sink) });
const uniq = () => Math.random().toString(36).slice(2, 10);

beforeAll(async () => {
  nc = await connectBus(process.env.NATS_URL!, 'portal-security-test');
  await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n });
  await upsertModel(db, { id: 'sim/lorem', pool: 'sim', upstream_model: 'lorem', input_price: 500_000n, output_price: 1_500_000n });
  // Every client of this file comes from 127.0.0.1: the sign-up throttle has its own test below.
  sink = await startMailSink();
  portal = await startPortal({ db: portalDb, nc, reconcileIntervalMs: 0, signupLimitPerHour: 1000, env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url } });
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await nc?.drain();
  await db.end();
  await portalDb.end();
});

async function tenantOf(email: string): Promise<string> {
  return (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id;
}

describe('accounts and sessions', () => {
  it('signs up (argon2id), signs out, signs in; cookies HttpOnly + SameSite, Secure behind TLS', async () => {
    const c = client(portal.url);
    const email = `Ana.${uniq()}@Example.com`;
    const r = await c.signUp(email);
    expect(r.status).toBe(303);
    expect(r.location).toBe('/dashboard');
    const sessionCookie = c.lastSetCookies.find((x) => x.startsWith('catraca_session='))!;
    expect(sessionCookie).toMatch(/HttpOnly/);
    expect(sessionCookie).toMatch(/SameSite=Lax/);
    expect(sessionCookie).not.toMatch(/Secure/);
    const row = (await db.query('select email, password_hash from portal_users where email = $1', [email.toLowerCase()])).rows[0];
    expect(row.email).toBe(email.toLowerCase());
    expect(row.password_hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
    // Only the SHA-256 of the cookie token is stored.
    const token = c.cookies.get('catraca_session')!;
    expect((await db.query('select count(*)::int as n from portal_sessions where id = sha256($1::bytea)', [Buffer.from(token)])).rows[0].n).toBe(1);

    const dash = await c.get('/dashboard');
    expect(dash.status).toBe(200);
    expect(dash.text).toContain('R$ 0,00');
    expect(dash.headers.get('content-security-policy')).toContain("script-src 'self'");

    const out = await c.post('/logout', { _csrf: PortalClient.csrf(dash.text) });
    expect(out.status).toBe(303);
    expect((await c.get('/dashboard')).location).toBe('/login');
    // The old token no longer works even if replayed.
    const replay = client(portal.url);
    replay.cookies.set('catraca_session', token);
    expect((await replay.get('/dashboard')).location).toBe('/login');

    const t = await c.csrfOf('/login');
    const bad = await c.post('/login', { _csrf: t, email, password: 'wrong password!' });
    expect(bad.status).toBe(401);
    expect(bad.text).toContain('E-mail ou senha incorretos.');
    const ok = await c.post('/login', { _csrf: PortalClient.csrf(bad.text), email: email.toUpperCase(), password: 'correct horse battery' });
    expect(ok.status).toBe(303);
    expect((await c.get('/dashboard')).status).toBe(200);

    const tls = client(portal.url);
    const proxied = await startPortal({
      db: portalDb,
      nc: null,
      trustedProxies: true,
      pixAdapter: portal.pix.psp,
      registerWebhook: false,
      reconcileIntervalMs: 0,
      signupLimitPerHour: 1000,
      env: { SMTP_URL: sink.url },
    });
    try {
      const p = client(proxied.url, { 'x-forwarded-proto': 'https' });
      await p.signUp(`tls.${uniq()}@example.com`);
      expect(p.lastSetCookies.find((x) => x.startsWith('catraca_session='))).toMatch(/; Secure/);
    } finally {
      await proxied.close();
    }
    expect(tls.cookies.size).toBe(0);
  });

  it('a taken e-mail signs nothing up (the same page as a new one: verification.test.ts), weak passwords are refused, login attempts rate-limited', async () => {
    const c = client(portal.url);
    const email = `bia.${uniq()}@example.com`;
    await c.signUp(email);
    const d = client(portal.url);
    expect((await d.signUpForm(email)).status).toBe(200);
    expect((await db.query('select count(*)::int as n from portal_users where email = $1', [email])).rows[0].n).toBe(1);
    expect((await d.post('/signup', { _csrf: await d.csrfOf('/signup'), email: `x.${uniq()}@example.com`, password: 'short' })).status).toBe(400);

    const e = client(portal.url);
    for (let i = 0; i < 5; i++) {
      const r = await e.post('/login', { _csrf: await e.csrfOf('/login'), email, password: `wrong-${i}-password` });
      expect(r.status).toBe(401);
    }
    const blocked = await e.post('/login', { _csrf: await e.csrfOf('/login'), email, password: 'correct horse battery' });
    expect(blocked.status).toBe(429);
    expect(blocked.text).toContain('Muitas tentativas');
  });

  it('sign-in rotates the session id: the cookie the browser had before is destroyed', async () => {
    const c = client(portal.url);
    const email = `rot.${uniq()}@example.com`;
    await c.signUp(email);
    const before = c.cookies.get('catraca_session')!;
    const sessions = async (token: string) =>
      (await db.query('select count(*)::int as n from portal_sessions where id = sha256($1::bytea)', [Buffer.from(token)])).rows[0].n;
    expect(await sessions(before)).toBe(1);
    // Sign in again from the same browser (it still sends the old cookie).
    const dash = await c.get('/dashboard');
    const again = await c.post('/login', { _csrf: PortalClient.csrf(dash.text), email, password: 'correct horse battery' });
    expect(again.status).toBe(303);
    const after = c.cookies.get('catraca_session')!;
    expect(after).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(after).not.toBe(before);
    expect(await sessions(before)).toBe(0);
    expect(await sessions(after)).toBe(1);
    const old = client(portal.url);
    old.cookies.set('catraca_session', before);
    expect((await old.get('/dashboard')).location).toBe('/login');
    expect((await c.get('/dashboard')).status).toBe(200);

    // A session planted by someone else (their own account) is destroyed when the victim signs in.
    const attacker = client(portal.url);
    await attacker.signUp(`planter.${uniq()}@example.com`);
    const planted = attacker.cookies.get('catraca_session')!;
    const victim = client(portal.url);
    victim.cookies.set('catraca_session', planted);
    const vEmail = `victim.${uniq()}@example.com`;
    await client(portal.url).signUp(vEmail);
    const form = await victim.get('/dashboard'); // the planted session: the attacker's dashboard
    expect((await victim.post('/login', { _csrf: PortalClient.csrf(form.text), email: vEmail, password: 'correct horse battery' })).status).toBe(303);
    expect(victim.cookies.get('catraca_session')).not.toBe(planted);
    expect(await sessions(planted)).toBe(0);
    expect((await attacker.get('/dashboard')).location).toBe('/login');
  });

  it('sessions expire after 30 minutes idle; last_seen_at slides at most once a minute', async () => {
    const c = client(portal.url);
    await c.signUp(`idle.${uniq()}@example.com`);
    const token = c.cookies.get('catraca_session')!;
    const setSeen = (ago: string) =>
      db.query(`update portal_sessions set last_seen_at = now() - $2::interval where id = sha256($1::bytea)`, [Buffer.from(token), ago]);
    const seen = async () =>
      (
        await db.query(`select last_seen_at, extract(epoch from now() - last_seen_at)::float8 as age_s from portal_sessions where id = sha256($1::bytea)`, [
          Buffer.from(token),
        ])
      ).rows[0];

    // 30 s ago: valid, and not written again (at most once a minute).
    await setSeen('30 seconds');
    const t0 = (await seen()).last_seen_at;
    expect((await c.get('/dashboard')).status).toBe(200);
    expect((await seen()).last_seen_at).toEqual(t0);
    // 29 min ago: valid, and slides to now.
    await setSeen('29 minutes');
    expect((await c.get('/dashboard')).status).toBe(200);
    expect((await seen()).age_s).toBeLessThan(5);
    // 31 min ago: expired.
    await setSeen('31 minutes');
    const r = await c.get('/dashboard');
    expect(r.status).toBe(303);
    expect(r.location).toBe('/login');
    expect((await c.get('/keys')).location).toBe('/login');
  });

  it('pt-BR by default, English with ?lang=en (kept in a cookie)', async () => {
    const c = client(portal.url);
    expect((await c.get('/login')).text).toContain('<html lang="pt-BR">');
    const en = await c.get('/login?lang=en');
    expect(en.text).toContain('<html lang="en">');
    expect(en.text).toContain('Sign in');
    expect((await c.get('/signup')).text).toContain('Create your account');
  });
});

describe('throttles (behind a trusted proxy: the client address is the right-most X-Forwarded-For entry)', () => {
  let proxied: Portal;
  // a fresh documentation address per test, in a /64 of its own (the throttles count IPv6 addresses by /64)
  const addr = () => `2001:db8:${randomBytes(2).toString('hex')}:${randomBytes(2).toString('hex')}::${randomBytes(2).toString('hex')}`;
  beforeAll(async () => {
    proxied = await startPortal({
      db: portalDb,
      nc: null,
      trustedProxies: true,
      pixAdapter: portal.pix.psp,
      registerWebhook: false,
      reconcileIntervalMs: 0,
      env: { SMTP_URL: sink.url },
    });
  });
  afterAll(async () => {
    await proxied?.close();
  });

  it('50 parallel wrong passwords for one e-mail: exactly 5 are checked (401), 45 get 429', async () => {
    const ip = addr();
    const c = client(proxied.url, { 'x-forwarded-for': ip });
    const email = `par.${uniq()}@example.com`;
    expect((await c.signUp(email)).status).toBe(303);
    const anon = client(proxied.url, { 'x-forwarded-for': ip });
    const token = await anon.csrfOf('/login');
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => anon.post('/login', { _csrf: token, email, password: `wrong-password-${i}` })));
    const statuses = results.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 401)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(45);
    expect(results.find((r) => r.status === 429)!.text).toContain('Muitas tentativas. Tente de novo em 15 minutos.');
    expect((await db.query('select count(*)::int as n from portal_login_failures where email = $1', [email])).rows[0].n).toBe(5);
    // The right password is refused too until the window passes.
    expect((await anon.post('/login', { _csrf: token, email, password: 'correct horse battery' })).status).toBe(429);
  });

  it('the address is the right-most X-Forwarded-For entry; rotating the left-most does not escape the per-address limit', async () => {
    const ip = addr();
    const c = client(proxied.url, { 'x-forwarded-for': `6.6.6.6, ${ip}` });
    const token = await c.csrfOf('/login');
    const email = `xff.${uniq()}@example.com`;
    expect((await c.post('/login', { _csrf: token, email, password: 'wrong password!' })).status).toBe(401);
    expect((await db.query('select ip from portal_login_failures where email = $1', [email])).rows).toEqual([{ ip: throttleKey(ip) }]);
    // 30 failures per address in 15 minutes (one is already recorded): 30 more parallel attempts,
    // each with a different e-mail and a different spoofed left-most entry → 29 checked, 1 refused.
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        c.post('/login', { _csrf: token, email: `xff${i}.${uniq()}@example.com`, password: 'wrong password!' }, { 'x-forwarded-for': `10.0.0.${i}, ${ip}` }),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 401)).toHaveLength(29);
    expect(statuses.filter((s) => s === 429)).toHaveLength(1);
    expect((await db.query('select count(*)::int as n from portal_login_failures where ip = $1', [throttleKey(ip)])).rows[0].n).toBe(30);
    expect((await db.query(`select count(*)::int as n from portal_login_failures where ip like '10.0.0.%' or ip = '6.6.6.6'`)).rows[0].n).toBe(0);
  });

  it('sign-ups: at most 10 per address per hour (12 in parallel → 10 accounts, 2 × 429; the address counted by its /64)', async () => {
    const ip = addr();
    const c = client(proxied.url, { 'x-forwarded-for': `1.2.3.4, ${ip}` });
    const token = await c.csrfOf('/signup');
    const prefix = `su${uniq()}`;
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        c.post('/signup', { _csrf: token, email: `${prefix}.${i}@example.com`, password: 'correct horse battery', org: '' }),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(2);
    expect(results.find((r) => r.status === 429)!.text).toContain('Muitos cadastros a partir deste endereço. Tente de novo em 60 minutos.');
    expect((await db.query(`select count(*)::int as n from portal_users where email like $1`, [`${prefix}.%`])).rows[0].n).toBe(10);
    // Another address is not affected.
    const other = client(proxied.url, { 'x-forwarded-for': addr() });
    expect((await other.signUp(`${prefix}.other@example.com`)).status).toBe(303);
  });
});

describe('CSRF', () => {
  it('a form post without (or with a wrong) CSRF token is rejected', async () => {
    const c = client(portal.url);
    const email = `csrf.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const noToken = await c.post('/keys', { label: 'evil', scope: 'all' });
    expect(noToken.status).toBe(403);
    const wrong = await c.post('/keys', { _csrf: 'x'.repeat(43), label: 'evil', scope: 'all' });
    expect(wrong.status).toBe(403);
    const token = await c.csrfOf('/keys');
    const crossSite = await c.post('/keys', { _csrf: token, label: 'evil', scope: 'all' }, { origin: 'https://evil.example' });
    expect(crossSite.status).toBe(403);
    expect((await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant])).rows[0].n).toBe(0);
    expect((await c.post('/topup', { amount: '50,00' })).status).toBe(403);
    expect((await db.query('select count(*)::int as n from pix_charges where tenant_id = $1', [tenant])).rows[0].n).toBe(0);
    // Sign-in and sign-up forms are protected too (double-submit cookie before a session exists).
    const anon = client(portal.url);
    expect((await anon.post('/login', { email, password: 'correct horse battery' })).status).toBe(403);
    expect((await anon.post('/signup', { email: `n.${uniq()}@example.com`, password: 'correct horse battery' })).status).toBe(403);
    // With the token, it works.
    const ok = await c.post('/keys', { _csrf: token, label: 'good', scope: 'all' });
    expect(ok.status).toBe(303);
    expect((await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant])).rows[0].n).toBe(1);
  });
});

describe('keys and top-ups through the portal', () => {
  it('creates a key shown exactly once, lists it, revokes it (broadcast on NATS)', async () => {
    const c = client(portal.url);
    const email = `keys.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/keys');
    const posted = await c.post('/keys', { _csrf: token, label: 'agente-1', scope: 'some', models: ['sim/echo'], limit: '12,50', limit_reset: 'weekly' });
    expect(posted.status).toBe(303);
    expect(posted.location).toMatch(/^\/keys\?created=[A-Za-z0-9_-]{22}$/);
    const created = await c.get(posted.location!);
    expect(created.status).toBe(200);
    expect(created.headers.get('cache-control')).toBe('no-store');
    const plain = /data-testid="new-key"|value="(sk-cat-v1-[0-9a-f]{64})"/.exec(created.text.replace(/\n/g, ' '));
    const key = /value="(sk-cat-v1-[0-9a-f]{64})"/.exec(created.text)![1];
    expect(plain).not.toBe(null);
    const row = (await db.query('select id, label, models, limit_micros, limit_reset, key_hint from api_keys where tenant_id = $1', [tenant])).rows[0];
    expect(row).toMatchObject({ label: 'agente-1', models: ['sim/echo'], limit_micros: 12_500_000n, limit_reset: 'weekly' });
    const list = await c.get('/keys');
    expect(list.text).not.toContain(key);
    expect(list.text).not.toContain('data-testid="new-key"');
    expect(list.text).toContain(row.key_hint);
    expect(list.text).toContain('R$ 12,50 (semanalmente)');

    const unknown = await c.post('/keys', { _csrf: token, label: 'x', scope: 'some', models: ['vendor/nope'] });
    expect(unknown.status).toBe(400);
    const none = await c.post('/keys', { _csrf: token, label: 'x', scope: 'some' });
    expect(none.status).toBe(400);

    const sub = nc.subscribe(subjects.keyInvalidated);
    const got = (async () => {
      for await (const m of sub) {
        const v = JSON.parse(new TextDecoder().decode(m.data));
        if (v.key_id === row.id) return v;
      }
    })();
    const confirm = await c.get(`/keys/${row.id}/revoke`);
    expect(confirm.status).toBe(200);
    const revoked = await c.post(`/keys/${row.id}/revoke`, { _csrf: PortalClient.csrf(confirm.text) });
    expect(revoked.status).toBe(200);
    expect(await Promise.race([got, new Promise((r) => setTimeout(() => r('timeout'), 2000))])).toEqual({ key_id: row.id });
    sub.unsubscribe();
    expect((await db.query('select revoked_at is not null as r from api_keys where id = $1', [row.id])).rows[0].r).toBe(true);
  });

  it("sets a key's request rate limit and expiry (what the front door enforces); refuses anything else", async () => {
    const c = client(portal.url);
    const email = `limits.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/keys');
    const before = Date.now();
    const posted = await c.post('/keys', { _csrf: token, label: 'limitada', scope: 'all', rate_requests: '30', rate_interval: 'm', expires: '30d' });
    expect(posted.status).toBe(303);
    const row = (await db.query('select rate_limit_requests, rate_limit_interval_s, expires_at from api_keys where tenant_id = $1', [tenant])).rows[0];
    expect([row.rate_limit_requests, row.rate_limit_interval_s]).toEqual([30, 60]);
    const expires = (row.expires_at as Date).getTime();
    expect(expires).toBeGreaterThanOrEqual(before + 30 * 86400_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 30 * 86400_000);
    const list = await c.get('/keys');
    expect(list.text).toContain('<td data-testid="key-rate">30 por minuto</td>');
    expect(list.text).not.toContain('<td data-testid="key-expires">nunca</td>');

    // Without them: no rate limit, no expiry.
    await c.post('/keys', { _csrf: token, label: 'livre', scope: 'all', rate_requests: '', rate_interval: 'm', expires: '' });
    const free = (
      await db.query(`select rate_limit_requests, rate_limit_interval_s, expires_at from api_keys where tenant_id = $1 and label = 'livre'`, [tenant])
    ).rows[0];
    expect(free).toEqual({ rate_limit_requests: null, rate_limit_interval_s: null, expires_at: null });

    for (const [fields, message] of [
      [{ rate_requests: 'muitas', rate_interval: 'm' }, 'Informe o limite de requisições como um número inteiro'],
      [{ rate_requests: '0', rate_interval: 'm' }, 'Informe o limite de requisições como um número inteiro'],
      [{ rate_requests: '10', rate_interval: 'y' }, 'Informe o limite de requisições como um número inteiro'],
      [{ rate_requests: '10000000', rate_interval: 's' }, 'Informe o limite de requisições como um número inteiro'],
      [{ expires: '3650d' }, 'Escolha quando a chave expira na lista.'],
      [{ expires: '2020-01-01' }, 'Escolha quando a chave expira na lista.'],
    ] as const) {
      const r = await c.post('/keys', { _csrf: token, label: 'recusada', scope: 'all', ...fields });
      expect(r.status).toBe(400);
      expect(r.text).toContain(message);
      // The form keeps what was typed.
      if ('rate_requests' in fields) expect(r.text).toContain(`value="${fields.rate_requests}" data-testid="key-rate-requests"`);
    }
    expect((await db.query(`select count(*)::int as n from api_keys where tenant_id = $1 and label = 'recusada'`, [tenant])).rows[0].n).toBe(0);
    const en = await c.get('/keys?lang=en');
    expect(en.text).toContain('<td data-testid="key-rate">30 per minute</td>');
  });

  it('tops up R$ 50,00 by Pix with the simulator; the status endpoint reports paid and the new balance', async () => {
    const c = client(portal.url);
    const email = `pix.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/topup');
    expect((await c.post('/topup', { _csrf: token, amount: '4,99' })).text).toContain('A recarga mínima é de R$ 5,00.');
    expect((await c.post('/topup', { _csrf: token, amount: '5000,01' })).text).toContain('A recarga máxima é de R$ 5.000,00.');
    // No thousands separators (the CLI's rule too): "5.000,01" and "1.500" are refused, never read as 5000,01 or 1,5.
    for (const amount of ['5.000,01', '1.500']) {
      const refused = await c.post('/topup', { _csrf: token, amount });
      expect(refused.status).toBe(400);
      expect(refused.text).toContain(
        `Escreva o valor sem separador de milhar, com vírgula (ou ponto) só antes dos centavos: 1500 ou 1500,00. &quot;${amount}&quot; é ambíguo.`,
      );
    }
    const r = await c.post('/topup', { _csrf: token, amount: '50,00' });
    expect(r.status).toBe(303);
    const txid = /^\/topup\/([a-f0-9]{32})$/.exec(r.location!)![1];
    const pageRes = await c.get(r.location!);
    expect(pageRes.text).toContain('Pix de R$ 50,00');
    expect(pageRes.text).toContain('src="data:image/png;base64,');
    expect(pageRes.text).toMatch(/00020101021226\d\d0014br\.gov\.bcb\.pix25/);
    const before = JSON.parse((await c.get(`/topup/${txid}/status`)).text);
    expect(before).toMatchObject({ status: 'ATIVA', amount: '50000000', balance_micros: '0' });
    const pay = await c.post(`/topup/${txid}/simulate`, { _csrf: PortalClient.csrf(pageRes.text) });
    expect(pay.status).toBe(303);
    // the simulator's webhook may still be on its way under load: the status page is what a browser polls
    let after = JSON.parse((await c.get(`/topup/${txid}/status`)).text);
    for (let i = 0; i < 50 && after.status !== 'CONCLUIDA'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      after = JSON.parse((await c.get(`/topup/${txid}/status`)).text);
    }
    expect(after).toMatchObject({ status: 'CONCLUIDA', balance_micros: '50000000', balance_display: 'R$ 50,00' });
    expect((await db.query('select balance_micros from tenants where id = $1', [tenant])).rows[0].balance_micros).toBe(50_000_000n);
    const ledger = await c.get('/ledger');
    expect(ledger.text).toContain('Recarga por Pix');
    expect(ledger.text).toContain('+R$ 50,00');
  });

  it('creating a key is Post/Redirect/Get: POST + GET + GET (refresh) = exactly one key, shown once', async () => {
    const c = client(portal.url);
    const email = `prg.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const keys = async () => (await db.query('select count(*)::int as n from api_keys where tenant_id = $1', [tenant])).rows[0].n;
    const posted = await c.post('/keys', { _csrf: await c.csrfOf('/keys'), label: 'prg', scope: 'all' });
    expect(posted.status).toBe(303);
    expect(posted.text).toBe('');
    expect(posted.text).not.toMatch(/sk-cat-v1-/);
    const first = await c.get(posted.location!);
    expect(first.status).toBe(200);
    const key = /value="(sk-cat-v1-[0-9a-f]{64})"/.exec(first.text)![1];
    expect(first.text).toContain('data-testid="created-key"');
    // The flash is stored encrypted: the plain key is not in the database.
    const stored = (await db.query('select count(*)::int as n from portal_flash where position($1::bytea in payload) > 0', [Buffer.from(key)])).rows[0].n;
    expect(stored).toBe(0);
    // Refresh: the same GET again.
    const second = await c.get(posted.location!);
    expect(second.status).toBe(200);
    expect(second.text).not.toContain(key);
    expect(second.text).not.toContain('data-testid="created-key"');
    expect(second.text).toContain('Esta chave já foi exibida uma vez e não pode ser mostrada de novo.');
    expect(await keys()).toBe(1);
    expect(
      (
        await db.query(
          'select count(*)::int as n from portal_flash f join portal_sessions s on s.id = f.session_id join portal_users u on u.id = s.user_id where u.tenant_id = $1',
          [tenant],
        )
      ).rows[0].n,
    ).toBe(0);

    // Another session (even of the same account) cannot take the flash.
    const posted2 = await c.post('/keys', { _csrf: await c.csrfOf('/keys'), label: 'prg-2', scope: 'all' });
    const other = client(portal.url);
    await other.post('/login', { _csrf: await other.csrfOf('/login'), email, password: 'correct horse battery' });
    const stolen = await other.get(posted2.location!);
    expect(stolen.status).toBe(200);
    expect(stolen.text).not.toMatch(/value="sk-cat-v1-/);
    expect((await c.get(posted2.location!)).text).toMatch(/value="sk-cat-v1-[0-9a-f]{64}"/);
    expect(await keys()).toBe(2);
  });

  it('at most 5 open Pix charges per tenant: the 6th top-up gets a clear message (also when sent in parallel)', async () => {
    const c = client(portal.url);
    const email = `open.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/topup');
    for (let i = 0; i < 5; i++) expect((await c.post('/topup', { _csrf: token, amount: '10,00' })).status).toBe(303);
    const sixth = await c.post('/topup', { _csrf: token, amount: '10,00' });
    expect(sixth.status).toBe(429);
    expect(sixth.text).toContain('Você já tem 5 cobranças Pix em aberto. Pague uma delas ou aguarde que expirem para gerar outra.');
    const open = async (t: string) => (await db.query(`select count(*)::int as n from pix_charges where tenant_id = $1 and status = 'ATIVA'`, [t])).rows[0].n;
    expect(await open(tenant)).toBe(5);
    // One expires: there is room for one more.
    await db.query(
      `update pix_charges set expires_at = now() - interval '1 second' where txid = (select txid from pix_charges where tenant_id = $1 order by created_at limit 1)`,
      [tenant],
    );
    expect((await c.post('/topup', { _csrf: token, amount: '10,00' })).status).toBe(303);
    expect((await c.post('/topup', { _csrf: token, amount: '10,00' })).status).toBe(429);

    // Ten at once from a new tenant: exactly five charges.
    const p = client(portal.url);
    const pEmail = `open-par.${uniq()}@example.com`;
    await p.signUp(pEmail);
    const pt = await p.csrfOf('/topup');
    const results = await Promise.all(Array.from({ length: 10 }, () => p.post('/topup', { _csrf: pt, amount: '7,00' })));
    expect(results.map((r) => r.status).filter((s) => s === 303)).toHaveLength(5);
    expect(results.map((r) => r.status).filter((s) => s === 429)).toHaveLength(5);
    expect(await open(await tenantOf(pEmail))).toBe(5);
  });

  it('an expired charge shows as expired', async () => {
    const c = client(portal.url);
    await c.signUp(`exp.${uniq()}@example.com`);
    const r = await c.post('/topup', { _csrf: await c.csrfOf('/topup'), amount: '10' });
    const txid = r.location!.split('/')[2];
    await db.query(`update pix_charges set expires_at = now() - interval '1 second' where txid = $1`, [txid]);
    expect(JSON.parse((await c.get(`/topup/${txid}/status`)).text).status).toBe('EXPIRADA');
    const pageRes = await c.get(`/topup/${txid}`);
    expect(pageRes.text).toContain('Esta cobrança expirou.');
  });
});

describe('IDOR: tenant A cannot read or act on tenant B', () => {
  it('keys and charges of another tenant are not found', async () => {
    const a = client(portal.url);
    const b = client(portal.url);
    await a.signUp(`a.${uniq()}@example.com`);
    const bEmail = `b.${uniq()}@example.com`;
    await b.signUp(bEmail);
    const bt = await b.csrfOf('/keys');
    await b.post('/keys', { _csrf: bt, label: 'b-secret-label', scope: 'all' });
    const bKey = (await db.query('select id, key_hint from api_keys where tenant_id = $1', [await tenantOf(bEmail)])).rows[0];
    const charge = await b.post('/topup', { _csrf: bt, amount: '25,00' });
    const bTxid = charge.location!.split('/')[2];

    const aKeys = await a.get('/keys');
    expect(aKeys.text).not.toContain('b-secret-label');
    expect(aKeys.text).not.toContain(bKey.key_hint);
    const at = PortalClient.csrf(aKeys.text);
    expect((await a.get(`/keys/${bKey.id}/revoke`)).status).toBe(404);
    expect((await a.post(`/keys/${bKey.id}/revoke`, { _csrf: at })).status).toBe(404);
    expect((await db.query('select revoked_at from api_keys where id = $1', [bKey.id])).rows[0].revoked_at).toBe(null);

    expect((await a.get(`/topup/${bTxid}`)).status).toBe(404);
    expect((await a.get(`/topup/${bTxid}/status`)).status).toBe(404);
    expect((await a.post(`/topup/${bTxid}/simulate`, { _csrf: at })).status).toBe(404);
    expect((await db.query('select status from pix_charges where txid = $1', [bTxid])).rows[0].status).toBe('ATIVA');
    expect((await a.get('/topup')).text).not.toContain(bTxid.slice(0, 8));
  });
});
