// The operator's console, its security (issue 21): every route needs an operator's session (table
// over the app's own routes), a tenant's portal session reaches none of them, CSRF and IDOR probes
// are refused, wrong TOTP codes are throttled per operator and per address, a TOTP code and a
// recovery code work once, the audit log refuses UPDATE, DELETE and TRUNCATE (the console's role by
// privilege, everyone by trigger), the console refuses the doors' ports, secrets are stored hashed.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credit } from '../../src/billing/ledger.ts';
import { createConsoleApp } from '../../src/console/app.ts';
import { createOperator, normalizeRecoveryCode, OPERATOR_LOGIN_MAX_CODE, type OperatorSetup, totpFor } from '../../src/console/auth.ts';
import { cleanUpConsole } from '../../src/console/cleanup.ts';
import { checkConsolePort } from '../../src/console/config.ts';
import { type ConsoleServer, startConsole } from '../../src/console/server.ts';
import { createApiKey } from '../../src/db/keys.ts';
import { createPool } from '../../src/db/pool.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createSession, signUp } from '../../src/portal/auth.ts';
import { compileTrust } from '../../src/web/proxy.ts';
import { sha256 } from '../../src/web/sessions.ts';
import { PortalClient } from '../portal/client.ts';

const ADMIN_URL = process.env.DATABASE_URL!;
const admin = createPool(ADMIN_URL, 3);
const consoleDb = createPool(derivedRoleUrl(ADMIN_URL, 'console'), 5);
const uniq = () => randomBytes(5).toString('hex');
/** A client address of its own (127.0.0.0/8): the sign-in throttle counts per address. */
const fromPeer = (ip: string) => new Agent({ localAddress: ip } as never);
let server: ConsoleServer;

beforeAll(async () => {
  server = await startConsole({ db: consoleDb, nc: null, port: 0 });
});
afterAll(async () => {
  await server?.close();
  await Promise.all([admin.end(), consoleDb.end()]);
});

async function operator(): Promise<OperatorSetup> {
  const r = await createOperator(admin, { email: `sec.${uniq()}@example.com`, createdBy: null });
  if (!r.ok) throw new Error(r.error);
  return r.setup;
}
/** A TOTP code not used yet: the step after the last accepted one (one step of drift is allowed). */
const code = (s: OperatorSetup, offsetSteps = 0) => totpFor(s.totpSecret, s.operator.email).generate({ timestamp: Date.now() + offsetSteps * 30000 });

async function signIn(client: PortalClient, s: OperatorSetup, c = code(s)) {
  // signed in already, the sign-in page sends the browser on: the form then carries the session's token
  let page = await client.get('/login');
  if (page.status === 303) page = await client.get('/tenants');
  const token = PortalClient.csrf(page.text);
  return client.post('/login', { _csrf: token, email: s.operator.email, password: s.password, code: c });
}
async function signedIn(peer?: string): Promise<{ client: PortalClient; setup: OperatorSetup }> {
  const setup = await operator();
  const client = new PortalClient(server.url, {}, peer ? { dispatcher: fromPeer(peer) } : {});
  const r = await signIn(client, setup);
  expect(r).toMatchObject({ status: 303, location: '/tenants' });
  return { client, setup };
}
async function tenantWithKey(balance = 5_000_000n) {
  const t = await createTenant(admin, `sec-${uniq()}`);
  if (balance) await credit(admin, { tenantId: t.id, amountMicros: balance, source: 'grant', note: 'test' });
  const k = await createApiKey(admin, { tenantId: t.id, label: 'sec' });
  return { tenantId: t.id, keyId: k.record.id };
}
const balanceOf = async (id: string) => (await admin.query('select balance_micros from tenants where id = $1', [id])).rows[0].balance_micros as bigint;
const ledgerRows = async (id: string) => (await admin.query('select count(*)::int as n from ledger where tenant_id = $1', [id])).rows[0].n as number;

/** Every route of the app, its parameters filled in, but the public ones (sign-in, health, static files). */
function protectedRoutes(): Array<{ method: string; path: string }> {
  const app = createConsoleApp({ db: consoleDb, nc: null, trust: compileTrust([]), publicHttps: false });
  const seen = new Set<string>();
  const out: Array<{ method: string; path: string }> = [];
  for (const r of app.routes) {
    // (use() and the form checks of every POST are middleware: `*` paths)
    if (r.method === 'ALL' || r.path === '/*' || r.path === '*' || r.path === '/login' || r.path.startsWith('/static/')) continue;
    const path = r.path.replace(/:(\w+)(\{(?:[^{}]|\{[^{}]*\})*\})?/g, (_, name: string) =>
      name === 'vendor' ? 'sim' : name === 'name' ? 'echo' : 'ten_probe',
    );
    const key = `${r.method} ${path}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ method: r.method, path });
  }
  return out;
}

describe('every console route needs an operator session', () => {
  it('the table of routes: without a session, or with a tenant’s portal session, each answers 303 to /login and does nothing', async () => {
    const routes = protectedRoutes();
    // the app's own routes, not a copy of a list: a new route is in the table by itself
    expect(routes.map((r) => `${r.method} ${r.path}`)).toEqual(
      expect.arrayContaining([
        'GET /tenants',
        'POST /tenants/ten_probe/grant',
        'POST /tenants/ten_probe/adjust',
        'POST /tenants/ten_probe/suspend',
        'POST /tenants/ten_probe/keys/ten_probe/revoke',
        'GET /catalog',
        'POST /catalog/models/sim/echo',
        'GET /money.csv',
        'GET /audit.csv',
        'POST /ledger-check',
        'POST /operators',
      ]),
    );
    expect(routes.length).toBeGreaterThanOrEqual(25);
    // a tenant with a portal account and a live portal session
    const email = `sec.portal.${uniq()}@example.com`;
    const signed = await signUp(admin, { email, password: 'senha-forte-123', ip: '198.51.100.77' });
    if (!signed.ok) throw new Error(signed.error);
    const portal = await createSession(admin, signed.user.id);
    // Other test files write audit rows meanwhile (their operators, their sign-ins, the CLI's
    // operator commands); a row these requests caused would name no operator, or carry this body's
    // reason or e-mail.
    const since = (await admin.query('select now() as t')).rows[0].t as Date;
    const auditOfThese = async () =>
      (
        await admin.query(
          `select count(*)::int as n from console_audit
            where at >= $1 and ip is distinct from 'cli'
              and (reason = 'x' or operator_email = 'x@example.com' or (operator_id is null and operator_email is null))`,
          [since],
        )
      ).rows[0].n;
    const cookies = [
      '',
      `catraca_session=${portal.token}`,
      // the portal's token under the console's cookie name is no operator session either
      `catraca_console_session=${portal.token}; catraca_console_csrf=${portal.csrf}`,
    ];
    const got: string[] = [];
    const want: string[] = [];
    for (const { method, path } of routes) {
      for (const cookie of cookies) {
        const res = await fetch(server.url + path, {
          method,
          redirect: 'manual',
          headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
          body:
            method === 'POST'
              ? new URLSearchParams({ _csrf: portal.csrf, amount: '10', reason: 'x', nonce: 'a'.repeat(22), email: 'x@example.com' })
              : undefined,
        });
        got.push(`${method} ${path} [${cookie.slice(0, 24)}] ${res.status} ${res.headers.get('location')}`);
        want.push(`${method} ${path} [${cookie.slice(0, 24)}] 303 /login`);
        await res.arrayBuffer();
      }
    }
    expect(got).toEqual(want);
    expect(await auditOfThese()).toBe(0);
    // the public ones
    expect((await fetch(`${server.url}/login`)).status).toBe(200);
    expect(await (await fetch(`${server.url}/healthz`)).json()).toEqual({ ok: true });
  }, 60000);

  it('its cookies are its own: HttpOnly, SameSite=Strict, never the portal’s names', async () => {
    const { client } = await signedIn();
    expect(client.lastSetCookies.join('\n')).toMatch(/^catraca_console_session=[A-Za-z0-9_-]{43}; Max-Age=43200; Path=\/; HttpOnly; SameSite=Strict$/m);
    expect([...client.cookies.keys()].sort()).toEqual(['catraca_console_csrf', 'catraca_console_session']);
  });

  it('refuses to share the front door’s or the portal’s port', () => {
    const reserved = [
      { name: 'front door', port: 8080 },
      { name: 'portal', port: 8081 },
    ];
    expect(() => checkConsolePort(8081, reserved)).toThrow(/^CONSOLE_PORT=8081 is the portal's port: the console listens on a port of its own/);
    expect(() => checkConsolePort(8080, reserved)).toThrow(/front door's port/);
    expect(() => checkConsolePort(8082, reserved)).not.toThrow();
  });
});

describe('CSRF and IDOR probes', () => {
  it('a grant without the session’s token, with the pre-sign-in token, or from another origin: 403, no money moves', async () => {
    const { client } = await signedIn();
    const t = await tenantWithKey();
    const page = await client.get(`/tenants/${t.tenantId}`);
    const token = PortalClient.csrf(page.text);
    const nonce = /name="nonce" value="([^"]+)"/.exec(page.text)![1];
    const form = { amount: '10,00', reason: 'csrf probe', nonce };
    expect((await client.post(`/tenants/${t.tenantId}/grant`, form)).status).toBe(403);
    expect((await client.post(`/tenants/${t.tenantId}/grant`, { ...form, _csrf: 'x'.repeat(43) })).status).toBe(403);
    expect((await client.post(`/tenants/${t.tenantId}/grant`, { ...form, _csrf: token }, { origin: 'http://evil.example' })).status).toBe(403);
    expect(await balanceOf(t.tenantId)).toBe(5_000_000n);
    expect(await ledgerRows(t.tenantId)).toBe(1);
    // the same form, as the page sends it: granted once, a second send is a duplicate
    const ok = await client.post(`/tenants/${t.tenantId}/grant`, { ...form, _csrf: token });
    expect(ok).toMatchObject({ status: 303, location: `/tenants/${t.tenantId}?done=grant` });
    expect((await client.post(`/tenants/${t.tenantId}/grant`, { ...form, _csrf: token })).location).toBe(`/tenants/${t.tenantId}?done=duplicate`);
    expect(await balanceOf(t.tenantId)).toBe(15_000_000n);
  });

  it('another tenant’s key under this tenant’s path is a 404 and stays live; another tenant’s request cannot be refunded here', async () => {
    const { client } = await signedIn();
    const a = await tenantWithKey();
    const b = await tenantWithKey();
    const page = await client.get(`/tenants/${a.tenantId}`);
    const token = PortalClient.csrf(page.text);
    const res = await client.post(`/tenants/${a.tenantId}/keys/${b.keyId}/revoke`, { _csrf: token });
    expect(res.status).toBe(404);
    expect((await admin.query('select revoked_at from api_keys where id = $1', [b.keyId])).rows[0].revoked_at).toBeNull();
    // a request of b's, refunded through a's page
    const requestId = `req_sec_${uniq()}`;
    await admin.query(
      // one statement: other test files check the whole ledger meanwhile
      `with d as (insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model)
                  values ($1, 'debit', 1000, 4999000, 'request', $2, $3, 'sim/echo'))
       update tenants set balance_micros = 4999000 where id = $1`,
      [b.tenantId, requestId, b.keyId],
    );
    const nonce = [...page.text.matchAll(/name="nonce" value="([^"]+)"/g)][1][1];
    const refund = await client.post(`/tenants/${a.tenantId}/adjust`, {
      _csrf: token,
      kind: 'credit',
      amount: '0,001',
      request_id: requestId,
      reason: 'idor',
      nonce,
    });
    expect(refund.status).toBe(400);
    expect(refund.text).toContain(`A requisição ${requestId} não é um débito deste cliente.`);
    expect(await balanceOf(a.tenantId)).toBe(5_000_000n);
    // a tenant that does not exist: 404, nothing written
    expect((await client.post('/tenants/ten_nobody/grant', { _csrf: token, amount: '1', reason: 'x', nonce: 'b'.repeat(22) })).status).toBe(404);
  });

  it('the adjustment rules: exact micro-reais, a debit never below the available balance, a refund never above what the request cost', async () => {
    const { client } = await signedIn();
    const t = await tenantWithKey(1_000_000n);
    const requestId = `req_adj_${uniq()}`;
    await admin.query(
      // one statement: other test files check the whole ledger meanwhile
      `with d as (insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model)
                  values ($1, 'debit', 12345, 987655, 'request', $2, $3, 'sim/echo'))
       update tenants set balance_micros = 987655 where id = $1`,
      [t.tenantId, requestId, t.keyId],
    );
    const post = async (form: Record<string, string>) => {
      const page = await client.get(`/tenants/${t.tenantId}`);
      const nonce = [...page.text.matchAll(/name="nonce" value="([^"]+)"/g)][1][1];
      return client.post(`/tenants/${t.tenantId}/adjust`, { _csrf: PortalClient.csrf(page.text), nonce, reason: 'teste', ...form });
    };
    expect((await post({ kind: 'credit', amount: '0,012346', request_id: requestId })).status).toBe(400);
    expect((await post({ kind: 'credit', amount: '0,012345', request_id: requestId })).location).toBe(`/tenants/${t.tenantId}?done=adjust`);
    expect((await post({ kind: 'credit', amount: '0,000001', request_id: requestId })).status).toBe(400);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
    const over = await post({ kind: 'debit', amount: '1,000001' });
    expect(over.status).toBe(409);
    expect(over.text).toContain('O débito passa do saldo disponível (R$ 1,00 menos o reservado). Nada foi alterado.');
    expect((await post({ kind: 'debit', amount: '1' })).location).toBe(`/tenants/${t.tenantId}?done=adjust`);
    expect(await balanceOf(t.tenantId)).toBe(0n);
    expect((await post({ kind: 'debit', amount: '0,000001' })).status).toBe(409);
    expect((await post({ kind: 'debit', amount: '1.500' })).text).toContain('Valor ambíguo');
    expect((await post({ kind: 'debit', amount: '0,01', reason: ' ' })).text).toContain('Informe o motivo.');
    const { rows } = await admin.query(
      `select kind, amount_micros, source, ref_request_id from ledger where tenant_id = $1 and source = 'adjustment' order by id`,
      [t.tenantId],
    );
    expect(rows).toEqual([
      { kind: 'credit', amount_micros: 12345n, source: 'adjustment', ref_request_id: requestId },
      { kind: 'debit', amount_micros: 1_000_000n, source: 'adjustment', ref_request_id: null },
    ]);
    const check = await client.post('/ledger-check', { _csrf: PortalClient.csrf((await client.get('/ledger-check')).text) });
    expect(check.text).toContain('data-ok="true"');
  });
});

describe('a key revoked from the console', () => {
  it('is revoked for its tenant, audited with before and after; a second revoke changes nothing', async () => {
    const { client, setup } = await signedIn();
    const t = await tenantWithKey();
    const token = PortalClient.csrf((await client.get(`/tenants/${t.tenantId}`)).text);
    // no NATS here: saved, and the page says the doors were not told
    expect((await client.post(`/tenants/${t.tenantId}/keys/${t.keyId}/revoke`, { _csrf: token })).location).toBe(`/tenants/${t.tenantId}?done=revoke&nats=0`);
    expect((await client.get(`/tenants/${t.tenantId}?done=revoke&nats=0`)).text).toContain('Salvo, mas o NATS não foi avisado');
    expect((await client.post(`/tenants/${t.tenantId}/keys/${t.keyId}/revoke`, { _csrf: token })).location).toBe(`/tenants/${t.tenantId}?done=already_revoked`);
    const { rows } = await admin.query('select operator_id, action, target, before, after from console_audit where tenant_id = $1', [t.tenantId]);
    expect(rows).toEqual([
      { operator_id: setup.operator.id, action: 'key_revoke', target: t.keyId, before: { revoked_at: null }, after: { revoked_at: expect.any(String) } },
    ]);
    expect((await admin.query('select revoked_at is not null as revoked from api_keys where id = $1', [t.keyId])).rows[0].revoked).toBe(true);
    // key.revoked for the tenant's webhooks and e-mails, made in the revocation's transaction, once
    const events = await admin.query(`select type, data->>'key_id' as key_id from notify_events where tenant_id = $1`, [t.tenantId]);
    expect(events.rows).toEqual([{ type: 'key.revoked', key_id: t.keyId }]);
  });
});

describe('grants and adjustments tell the notifier', () => {
  it('an adjustment that empties a balance makes balance.depleted in its transaction; a grant that refills it re-arms it', async () => {
    const {
      setup: { operator },
    } = await signedIn();
    const t = await tenantWithKey(20_000n);
    const adjust = await consoleDb.query(`select * from catraca_console_adjust($1, '127.0.0.1', $2, 'debit', 15000, null, null, 'test', $3)`, [
      operator.id,
      t.tenantId,
      uniq(),
    ]);
    expect(adjust.rows[0]).toMatchObject({ status: 'debited', balance: 5000n });
    const types = async () =>
      (await admin.query('select type from notify_events where tenant_id = $1 order by created_at, id', [t.tenantId])).rows.map((r) => r.type);
    expect(await types()).toEqual(['balance.depleted']);
    const grant = await consoleDb.query(`select * from catraca_console_grant($1, '127.0.0.1', $2, 1000000, null, 'test', $3)`, [
      operator.id,
      t.tenantId,
      uniq(),
    ]);
    expect(grant.rows[0].status).toBe('credited');
    expect((await admin.query('select depleted_fired from notify_tenants where tenant_id = $1', [t.tenantId])).rows[0].depleted_fired).toBe(false);
  });
});

describe('over https (CONSOLE_PUBLIC_URL)', () => {
  it('cookies are Secure and HSTS is sent', async () => {
    const https = await startConsole({ db: consoleDb, nc: null, port: 0, publicUrl: 'https://console.vpn.example' });
    try {
      const res = await fetch(`${https.url}/login`);
      expect(res.headers.get('strict-transport-security')).toBe('max-age=31536000');
      expect(res.headers.getSetCookie()).toEqual([
        expect.stringMatching(/^catraca_console_csrf=[A-Za-z0-9_-]{43}; Max-Age=3600; Path=\/; HttpOnly; Secure; SameSite=Strict$/),
      ]);
    } finally {
      await https.close();
    }
    expect((await fetch(`${server.url}/login`)).headers.get('strict-transport-security')).toBeNull();
  });
});

describe('sign-in', () => {
  it('wrong TOTP codes are throttled per operator: after 5, even the right code waits; each attempt is audited', async () => {
    const s = await operator();
    const client = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.21') });
    const wrong = String((Number(code(s)) + 1) % 1_000_000).padStart(6, '0');
    const statuses: number[] = [];
    for (let i = 0; i < OPERATOR_LOGIN_MAX_CODE; i++) statuses.push((await signIn(client, s, wrong)).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401]);
    const locked = await signIn(client, s);
    expect(locked.status).toBe(429);
    expect(locked.headers.get('retry-after')).toBe('900');
    expect(locked.text).toContain('Tentativas demais. Tente de novo em 15 minutos.');
    // from another address the operator is throttled too (per operator, not only per address)
    expect((await signIn(new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.22') }), s)).status).toBe(429);
    const { rows } = await admin.query('select action, ip, operator_id from console_audit where operator_id = $1 order by id', [s.operator.id]);
    expect(rows).toEqual(Array.from({ length: 5 }, () => ({ action: 'totp_failed', ip: '127.0.0.21', operator_id: s.operator.id })));
  });

  it('wrong passwords lock the (e-mail, address) pair, not the operator: after 5 from address A the operator signs in from address B', async () => {
    const s = await operator();
    const a = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.31') });
    const wrongPassword = async (client: PortalClient) => {
      const token = await client.csrfOf('/login');
      return (await client.post('/login', { _csrf: token, email: s.operator.email, password: 'not-the-password', code: code(s) })).status;
    };
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push(await wrongPassword(a));
    expect(statuses).toEqual([401, 401, 401, 401, 401]);
    // address A is held for this e-mail, even with the right password …
    const held = await signIn(a, s);
    expect(held.status).toBe(429);
    expect(held.headers.get('retry-after')).toBe('900');
    // … address B is not: the operator signs in
    const b = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.32') });
    expect(await signIn(b, s)).toMatchObject({ status: 303, location: '/tenants' });
    // a flood of held attempts from A is audited once for the window, not once per request
    for (let i = 0; i < 10; i++) expect(await wrongPassword(a)).toBe(429);
    const throttled = await admin.query(`select operator_id, operator_email, after from console_audit where action = 'login_throttled' and ip = $1`, [
      '127.0.0.31',
    ]);
    expect(throttled.rows).toEqual([{ operator_id: null, operator_email: s.operator.email, after: { retry_after_s: 900 } }]);
    const failed = await admin.query(`select count(*)::int as n from console_audit where action = 'login_failed' and operator_id = $1`, [s.operator.id]);
    expect(failed.rows[0].n).toBe(5);
  });

  it('the e-mail as a whole backs off: past 10 wrong passwords from anywhere, the next waits (seconds), never a 15-minute lock', async () => {
    const s = await operator();
    for (let i = 0; i < 10; i++)
      await admin.query(`insert into operator_login_failures (email, ip, kind) values ($1, $2, 'password')`, [s.operator.email, `198.51.100.${i + 1}`]);
    const held = await signIn(new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.33') }), s);
    expect(held.status).toBe(429);
    expect(Number(held.headers.get('retry-after'))).toBeLessThanOrEqual(1);
    expect(held.text).toContain('segundos');
  });

  it('old throttle rows are cleaned up past the retention; the window’s stay', async () => {
    const email = `clean.${uniq()}@example.com`;
    await admin.query(
      `insert into operator_login_failures (email, ip, created_at) values ($1, '198.51.100.1', now() - interval '2 hours'), ($1, '198.51.100.1', now())`,
      [email],
    );
    await cleanUpConsole(consoleDb);
    const { rows } = await admin.query('select count(*)::int as n from operator_login_failures where email = $1', [email]);
    expect(rows[0].n).toBe(1);
  });

  it('per address: 20 failures from one address lock it for every e-mail', async () => {
    const peer = '127.0.0.23';
    const client = new PortalClient(server.url, {}, { dispatcher: fromPeer(peer) });
    for (let i = 0; i < 20; i++) {
      const token = await client.csrfOf('/login');
      expect((await client.post('/login', { _csrf: token, email: `nobody.${uniq()}@example.com`, password: 'wrong-password-1', code: '123456' })).status).toBe(
        401,
      );
    }
    const s = await operator();
    expect((await signIn(client, s)).status).toBe(429);
    const { rows } = await admin.query(`select count(*)::int as n from console_audit where ip = $1 and action = 'login_failed' and operator_id is null`, [
      peer,
    ]);
    expect(rows[0].n).toBe(20);
  });

  it('a TOTP code works once; a recovery code works once, instead of a TOTP code; a wrong password says the same as a wrong code', async () => {
    const s = await operator();
    const c = code(s);
    const first = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.24') });
    expect((await signIn(first, s, c)).status).toBe(303);
    const replay = await signIn(new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.24') }), s, c);
    expect(replay.status).toBe(401);
    expect(replay.text).toContain('E-mail, senha ou código incorretos.');
    const badPassword = await (async () => {
      const cl = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.24') });
      const token = await cl.csrfOf('/login');
      return cl.post('/login', { _csrf: token, email: s.operator.email, password: 'not-the-password', code: code(s, 1) });
    })();
    expect(badPassword.status).toBe(401);
    expect(badPassword.text).toContain('E-mail, senha ou código incorretos.');
    const recovery = s.recoveryCodes[3].toUpperCase();
    const withCode = new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.25') });
    expect(await signIn(withCode, s, recovery)).toMatchObject({ status: 303, location: '/tenants?codes_left=9' });
    expect((await withCode.get('/tenants?codes_left=9')).text).toContain('Você entrou com um código de recuperação; restam 9.');
    expect((await signIn(new PortalClient(server.url, {}, { dispatcher: fromPeer('127.0.0.25') }), s, recovery)).status).toBe(401);
    const actions = (await admin.query('select action from console_audit where operator_id = $1 order by id', [s.operator.id])).rows.map((r) => r.action);
    expect(actions).toEqual(['login', 'totp_failed', 'login_failed', 'login', 'recovery_code_used', 'totp_failed']);
  });

  it('a new session id at every sign-in; sign-out ends it; a disabled operator’s session ends', async () => {
    const { client, setup } = await signedIn('127.0.0.26');
    const before = client.cookies.get('catraca_console_session')!;
    expect((await signIn(client, setup, code(setup, 1))).status).toBe(303);
    const after = client.cookies.get('catraca_console_session')!;
    expect(after).not.toBe(before);
    expect((await admin.query('select count(*)::int as n from operator_sessions where id = $1', [sha256(before)])).rows[0].n).toBe(0);
    const token = PortalClient.csrf((await client.get('/tenants')).text);
    expect(await client.post('/logout', { _csrf: token })).toMatchObject({ status: 303, location: '/login?bye=1' });
    expect((await admin.query('select count(*)::int as n from operator_sessions where id = $1', [sha256(after)])).rows[0].n).toBe(0);
    expect((await client.get('/tenants')).location).toBe('/login');
    // disabled by another operator: its live session stops at once
    const other = await signedIn('127.0.0.27');
    const victim = await signedIn('127.0.0.28');
    const page = await other.client.get('/operators');
    expect((await other.client.post(`/operators/${victim.setup.operator.id}/disable`, { _csrf: PortalClient.csrf(page.text) })).location).toBe(
      '/operators?disabled=1',
    );
    expect((await victim.client.get('/tenants')).location).toBe('/login');
  });

  it('secrets are stored hashed or not at all: the password (argon2id), the recovery codes (SHA-256); the session token only as its SHA-256', async () => {
    const { client, setup } = await signedIn('127.0.0.29');
    const { rows } = await admin.query('select password_hash, totp_secret from operators where id = $1', [setup.operator.id]);
    expect(rows[0].password_hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
    expect(rows[0].password_hash).not.toContain(setup.password);
    expect(rows[0].totp_secret).toBe(setup.totpSecret);
    const hashes = (await admin.query('select code_hash from operator_recovery_codes where operator_id = $1', [setup.operator.id])).rows.map((r) =>
      (r.code_hash as Buffer).toString('hex'),
    );
    expect(hashes.sort()).toEqual(setup.recoveryCodes.map((c) => sha256(`catraca-operator-recovery:${normalizeRecoveryCode(c)}`).toString('hex')).sort());
    const token = client.cookies.get('catraca_console_session')!;
    const stored = (await admin.query('select id from operator_sessions where operator_id = $1', [setup.operator.id])).rows.map((r) =>
      (r.id as Buffer).toString('hex'),
    );
    expect(stored).toEqual([sha256(token).toString('hex')]);
    // the audit log of a sign-in holds no secret
    const audit = JSON.stringify(
      (
        await admin.query('select operator_email, action, ip, tenant_id, target, reason, before, after from console_audit where operator_id = $1', [
          setup.operator.id,
        ])
      ).rows,
    );
    for (const secret of [setup.password, setup.totpSecret, token, ...setup.recoveryCodes]) expect(audit).not.toContain(secret);
  });
});

describe('the audit log is append-only', () => {
  it('the console’s role may not UPDATE, DELETE or TRUNCATE it (no privilege); the owner and a superuser are refused by the trigger', async () => {
    await admin.query(`insert into console_audit (action, ip) values ('login_failed', '192.0.2.1')`);
    for (const sql of [`update console_audit set reason = 'rewritten'`, 'delete from console_audit', 'truncate console_audit']) {
      await expect(consoleDb.query(sql), sql).rejects.toMatchObject({
        code: '42501',
        message: expect.stringMatching(/^permission denied for table console_audit/),
      });
    }
    const owner = new pg.Client({ connectionString: ADMIN_URL });
    await owner.connect();
    try {
      for (const role of ['catraca_owner', 'postgres']) {
        if (role === 'catraca_owner') await owner.query('set role catraca_owner');
        else await owner.query('reset role');
        for (const [sql, op] of [
          [`update console_audit set reason = 'rewritten'`, 'UPDATE'],
          ['delete from console_audit', 'DELETE'],
          ['truncate console_audit', 'TRUNCATE'],
        ]) {
          await expect(owner.query(sql), `${role}: ${sql}`).rejects.toMatchObject({ code: '42501', message: `console_audit is append-only: ${op} refused` });
        }
      }
    } finally {
      await owner.end();
    }
    expect((await admin.query(`select count(*)::int as n from console_audit where ip = '192.0.2.1'`)).rows[0].n).toBeGreaterThanOrEqual(1);
  });
});

describe('suspending and reactivating a tenant', () => {
  it('each with a reason and once: suspending again is said so, reactivating one not suspended is a 409; both audited with before and after', async () => {
    const { client } = await signedIn();
    const { tenantId } = await tenantWithKey(0n);
    const _csrf = await client.csrfOf(`/tenants/${tenantId}`);
    const state = async () => (await admin.query('select suspended_at, suspended_reason from tenants where id = $1', [tenantId])).rows[0];
    expect((await client.post(`/tenants/${tenantId}/suspend`, { _csrf, reason: '  ' })).status).toBe(400);
    expect((await state()).suspended_at).toBeNull();
    // no NATS here (nc: null): the answer says the front doors were not told
    expect(await client.post(`/tenants/${tenantId}/suspend`, { _csrf, reason: 'abuse report' })).toMatchObject({
      status: 303,
      location: `/tenants/${tenantId}?done=suspend&nats=0`,
    });
    const suspended = await state();
    expect(suspended.suspended_reason).toBe('abuse report');
    expect(await client.post(`/tenants/${tenantId}/suspend`, { _csrf, reason: 'again' })).toMatchObject({
      status: 303,
      location: `/tenants/${tenantId}?done=already_suspended`,
    });
    expect(await state()).toEqual(suspended);
    expect(await client.post(`/tenants/${tenantId}/reactivate`, { _csrf, reason: 'checked' })).toMatchObject({
      status: 303,
      location: `/tenants/${tenantId}?done=reactivate&nats=0`,
    });
    expect(await state()).toEqual({ suspended_at: null, suspended_reason: null });
    const again = await client.post(`/tenants/${tenantId}/reactivate`, { _csrf, reason: 'checked' });
    expect(again.status).toBe(409);
    expect(again.text).toContain('Este cliente não está suspenso.');
    const { rows } = await admin.query('select action, reason, before, after from console_audit where tenant_id = $1 order by id', [tenantId]);
    const at = suspended.suspended_at.toISOString();
    expect(rows).toEqual([
      { action: 'suspend', reason: 'abuse report', before: { suspended_at: null }, after: { suspended_at: at, reason: 'abuse report' } },
      { action: 'reactivate', reason: 'checked', before: { suspended_at: at, reason: 'abuse report' }, after: { suspended_at: null } },
    ]);
  });
});
