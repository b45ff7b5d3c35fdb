import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from 'nats';
import { connectBus } from '../../src/bus/connect.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { createPool } from '../../src/db/pool.ts';
import { upsertModel } from '../../src/db/models.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { PortalClient } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
let nc: NatsConnection;
let portal: Portal;
const uniq = () => Math.random().toString(36).slice(2, 10);

beforeAll(async () => {
  nc = await connectBus(process.env.NATS_URL!, 'portal-security-test');
  await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n });
  await upsertModel(db, { id: 'sim/lorem', pool: 'sim', upstream_model: 'lorem', input_price: 500_000n, output_price: 1_500_000n });
  portal = await startPortal({ db, nc, reconcileIntervalMs: 0, env: { PIX_PROVIDER: 'simulator' } });
});
afterAll(async () => {
  await portal?.close();
  await nc?.drain();
  await db.end();
});

async function tenantOf(email: string): Promise<string> {
  return (await db.query('select tenant_id from portal_users where email = $1', [email])).rows[0].tenant_id;
}

describe('accounts and sessions', () => {
  it('signs up (argon2id), signs out, signs in; cookies HttpOnly + SameSite, Secure behind TLS', async () => {
    const c = new PortalClient(portal.url);
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
    const replay = new PortalClient(portal.url);
    replay.cookies.set('catraca_session', token);
    expect((await replay.get('/dashboard')).location).toBe('/login');

    const t = await c.csrfOf('/login');
    const bad = await c.post('/login', { _csrf: t, email, password: 'wrong password!' });
    expect(bad.status).toBe(401);
    expect(bad.text).toContain('E-mail ou senha incorretos.');
    const ok = await c.post('/login', { _csrf: PortalClient.csrf(bad.text), email: email.toUpperCase(), password: 'correct horse battery' });
    expect(ok.status).toBe(303);
    expect((await c.get('/dashboard')).status).toBe(200);

    const tls = new PortalClient(portal.url);
    const proxied = await startPortal({ db, nc: null, trustProxy: true, pixAdapter: portal.pix.psp, registerWebhook: false, reconcileIntervalMs: 0 });
    try {
      const p = new PortalClient(proxied.url, { 'x-forwarded-proto': 'https' });
      await p.signUp(`tls.${uniq()}@example.com`);
      expect(p.lastSetCookies.find((x) => x.startsWith('catraca_session='))).toMatch(/; Secure/);
    } finally {
      await proxied.close();
    }
    expect(tls.cookies.size).toBe(0);
  });

  it('rejects duplicate e-mails, weak passwords, and rate-limits login attempts', async () => {
    const c = new PortalClient(portal.url);
    const email = `bia.${uniq()}@example.com`;
    await c.signUp(email);
    const d = new PortalClient(portal.url);
    expect((await d.signUp(email)).status).toBe(409);
    expect((await d.post('/signup', { _csrf: await d.csrfOf('/signup'), email: `x.${uniq()}@example.com`, password: 'short' })).status).toBe(400);

    const e = new PortalClient(portal.url);
    for (let i = 0; i < 5; i++) {
      const r = await e.post('/login', { _csrf: await e.csrfOf('/login'), email, password: `wrong-${i}-password` });
      expect(r.status).toBe(401);
    }
    const blocked = await e.post('/login', { _csrf: await e.csrfOf('/login'), email, password: 'correct horse battery' });
    expect(blocked.status).toBe(429);
    expect(blocked.text).toContain('Muitas tentativas');
  });

  it('pt-BR by default, English with ?lang=en (kept in a cookie)', async () => {
    const c = new PortalClient(portal.url);
    expect((await c.get('/login')).text).toContain('<html lang="pt-BR">');
    const en = await c.get('/login?lang=en');
    expect(en.text).toContain('<html lang="en">');
    expect(en.text).toContain('Sign in');
    expect((await c.get('/signup')).text).toContain('Create your account');
  });
});

describe('CSRF', () => {
  it('a form post without (or with a wrong) CSRF token is rejected', async () => {
    const c = new PortalClient(portal.url);
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
    const anon = new PortalClient(portal.url);
    expect((await anon.post('/login', { email, password: 'correct horse battery' })).status).toBe(403);
    expect((await anon.post('/signup', { email: `n.${uniq()}@example.com`, password: 'correct horse battery' })).status).toBe(403);
    // With the token, it works.
    const ok = await c.post('/keys', { _csrf: token, label: 'good', scope: 'all' });
    expect(ok.status).toBe(201);
  });
});

describe('keys and top-ups through the portal', () => {
  it('creates a key shown exactly once, lists it, revokes it (broadcast on NATS)', async () => {
    const c = new PortalClient(portal.url);
    const email = `keys.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/keys');
    const created = await c.post('/keys', { _csrf: token, label: 'agente-1', scope: 'some', models: ['sim/echo'], limit: '12,50', limit_reset: 'weekly' });
    expect(created.status).toBe(201);
    expect(created.headers.get('cache-control')).toBe('no-store');
    const plain = /data-testid="new-key"|value="(sk-cat-v1-[0-9a-f]{64})"/.exec(created.text.replace(/\n/g, ' '));
    const key = /value="(sk-cat-v1-[0-9a-f]{64})"/.exec(created.text)![1];
    expect(plain).not.toBe(null);
    const row = (await db.query('select id, label, models, limit_micros, limit_reset, key_hint from api_keys where tenant_id = $1', [tenant])).rows[0];
    expect(row).toMatchObject({ label: 'agente-1', models: ['sim/echo'], limit_micros: 12_500_000n, limit_reset: 'weekly' });
    const list = await c.get('/keys');
    expect(list.text).not.toContain(key);
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

  it('tops up R$ 50,00 by Pix with the simulator; the status endpoint reports paid and the new balance', async () => {
    const c = new PortalClient(portal.url);
    const email = `pix.${uniq()}@example.com`;
    await c.signUp(email);
    const tenant = await tenantOf(email);
    const token = await c.csrfOf('/topup');
    expect((await c.post('/topup', { _csrf: token, amount: '4,99' })).text).toContain('A recarga mínima é de R$ 5,00.');
    expect((await c.post('/topup', { _csrf: token, amount: '5.000,01' })).text).toContain('A recarga máxima é de R$ 5.000,00.');
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
    const after = JSON.parse((await c.get(`/topup/${txid}/status`)).text);
    expect(after).toMatchObject({ status: 'CONCLUIDA', balance_micros: '50000000', balance_display: 'R$ 50,00' });
    expect((await db.query('select balance_micros from tenants where id = $1', [tenant])).rows[0].balance_micros).toBe(50_000_000n);
    const ledger = await c.get('/ledger');
    expect(ledger.text).toContain('Recarga por Pix');
    expect(ledger.text).toContain('+R$ 50,00');
  });

  it('an expired charge shows as expired', async () => {
    const c = new PortalClient(portal.url);
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
    const a = new PortalClient(portal.url);
    const b = new PortalClient(portal.url);
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
