// Issue 22, items 2, 4 and 6 for the portal: anonymous traffic cannot grow the database (the Pix
// webhook under a flood of wrong secrets, retention of the audit and attempt tables), the portal
// behind its proxy (trusted proxy addresses, the per-(e-mail, address) sign-in lock, Secure
// cookies and HSTS), and strings PostgreSQL cannot store refused at every form, naming the field.
import { randomBytes } from 'node:crypto';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { upsertModel } from '../../src/db/models.ts';
import { createMetrics } from '../../src/metrics/registry.ts';
import { getSetting, SETTINGS } from '../../src/pix/settings.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { PortalClient } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const uniq = () => Math.random().toString(36).slice(2, 10);
const PASSWORD = 'correct horse battery';
/** A fresh client address (IPv4 benchmark range) per use. */
const addr = () => `198.18.${randomBytes(1)[0]}.${1 + (randomBytes(1)[0] % 254)}`;
/** Requests from another loopback address than 127.0.0.1: a peer that is not a trusted proxy. */
const fromPeer = (ip: string) => new Agent({ localAddress: ip } as never);

/** An account made directly in the database (sign-up has its own tests in verification.test.ts). */
async function account(email: string): Promise<string> {
  const tenant = await createTenant(db, email);
  await db.query('insert into portal_users (id, tenant_id, email, password_hash) values ($1, $2, $3, $4)', [
    `usr_${uniq()}${uniq()}`,
    tenant.id,
    email,
    await hashPassword(PASSWORD),
  ]);
  return tenant.id;
}
const login = async (portal: Portal, email: string, password: string, headers: Record<string, string> = {}, dispatcher?: Agent) => {
  const c = new PortalClient(portal.url, headers, { dispatcher });
  return c.post('/login', { _csrf: await c.csrfOf('/login'), email, password });
};

afterAll(async () => {
  await db.end();
});

describe('anonymous traffic cannot grow the database', () => {
  it('a flood of wrong webhook secrets stores nothing, is counted and logged, and is answered 429 past the limit', async () => {
    const metrics = createMetrics();
    const portal = await startPortal({ db, nc: null, reconcileIntervalMs: 0, registerWebhook: false, metrics, env: { PIX_PROVIDER: 'simulator' } });
    const attacker = `127.0.0.${2 + Math.floor(Math.random() * 250)}`;
    const agent = fromPeer(attacker);
    try {
      const secret = (await getSetting(db, SETTINGS.webhookSecret))!;
      const stored = async (remote: string) =>
        (await db.query('select count(*)::int as n from pix_webhook_events where remote_addr = $1', [remote])).rows[0].n as number;
      const before = await stored(attacker);
      const notice = JSON.stringify({
        pix: [{ endToEndId: 'E12345678202501011200abcdefghijk', txid: randomBytes(16).toString('hex'), valor: '1.00', horario: new Date().toISOString() }],
      });
      const statuses: number[] = [];
      let retryAfter: string | null = null;
      for (let batch = 0; batch < 10; batch++) {
        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            undiciFetch(`${portal.url}/webhooks/pix/${'0'.repeat(40)}${batch}${i}/pix`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: notice,
              dispatcher: agent,
            }),
          ),
        );
        for (const a of answers) {
          statuses.push(a.status);
          if (a.status === 429) {
            retryAfter = a.headers.get('retry-after');
            expect(await a.json()).toEqual({ error: 'too many requests' });
          } else await a.text();
        }
      }
      expect(statuses.filter((s) => s === 401)).toHaveLength(10);
      expect(statuses.filter((s) => s === 429)).toHaveLength(190);
      expect(Number(retryAfter)).toBeGreaterThan(0);
      expect(await stored(attacker)).toBe(before);
      expect(metrics.counter('catraca_pix_webhook_rejected_total', '', { reason: 'bad_secret' }).value).toBe(10);
      expect(metrics.counter('catraca_portal_rate_limited_total', '', { route: 'pix_webhook' }).value).toBe(190);
      // The PSP (another address, the right secret) is not affected; its notice is audited.
      const psp = await fetch(`${portal.url}/webhooks/pix/${secret}/pix`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: notice });
      expect(psp.status).toBe(200);
      expect(await psp.json()).toEqual({ received: 1 });
      // Even the right secret from the flooding address waits for its budget.
      const fromAttacker = await undiciFetch(`${portal.url}/webhooks/pix/${secret}/pix`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: notice,
        dispatcher: agent,
      });
      expect(fromAttacker.status).toBe(429);
    } finally {
      await agent.close();
      await portal.close();
    }
  });

  it('the cleanup deletes webhook audit rows past PIX_WEBHOOK_RETENTION_DAYS and attempts past their windows, a bounded number per pass', async () => {
    const { cleanUp } = await import('../../src/portal/cleanup.ts');
    const tag = uniq();
    for (const age of ['91 days', '91 days', '91 days', '89 days'])
      await db.query(`insert into pix_webhook_events (outcome, detail, created_at) values ('unknown_txid', $1, now() - $2::interval)`, [`${tag} ${age}`, age]);
    for (const [email, age] of [
      [`old.${tag}@example.com`, '16 minutes'],
      [`old.${tag}@example.com`, '16 minutes'],
      [`new.${tag}@example.com`, '1 minute'],
    ])
      await db.query(`insert into portal_login_failures (email, ip, created_at) values ($1, $2, now() - $3::interval)`, [email, tag, age]);
    for (const [ip, age] of [
      [`old.${tag}`, '61 minutes'],
      [`new.${tag}`, '1 minute'],
    ])
      await db.query(`insert into portal_signup_attempts (ip, created_at) values ($1, now() - $2::interval)`, [ip, age]);
    const webhookRows = async () =>
      (await db.query(`select detail from pix_webhook_events where detail like $1 order by detail`, [`${tag} %`])).rows.map((r) => r.detail);

    // At most `batch` rows per table and pass, until nothing past its window is left. Other test
    // files clean the same database at the same time, so how many rows a pass takes is not exact.
    let passes = 0;
    for (;;) {
      const r = await cleanUp(db, { webhookRetentionDays: 90, batch: 2 });
      passes++;
      expect(Math.max(...Object.values(r))).toBeLessThanOrEqual(2);
      if (Object.values(r).every((n) => n < 2) || passes > 200) break;
    }
    expect(await webhookRows()).toEqual([`${tag} 89 days`]);
    expect((await db.query('select email from portal_login_failures where ip = $1', [tag])).rows).toEqual([{ email: `new.${tag}@example.com` }]);
    expect((await db.query('select ip from portal_signup_attempts where ip like $1', [`%.${tag}`])).rows).toEqual([{ ip: `new.${tag}` }]);
    // 0: audit rows are kept forever
    await cleanUp(db, { webhookRetentionDays: 0, batch: 100 });
    expect(await webhookRows()).toEqual([`${tag} 89 days`]);
  });

  it('sign-ups never verified go after PORTAL_UNVERIFIED_SIGNUP_DAYS, with their company when nothing else was made in it', async () => {
    const { cleanUp } = await import('../../src/portal/cleanup.ts');
    const { createApiKey } = await import('../../src/db/keys.ts');
    const { createSession } = await import('../../src/portal/auth.ts');
    /** A sign-up made `age` ago, as signUp writes it: a tenant and its owner; verified or not. */
    async function signup(age: string, verified: boolean) {
      const tenantId = (await createTenant(db, `signup-${uniq()}`)).id;
      const id = `usr_${uniq()}${uniq()}`;
      await db.query(
        `insert into portal_users (id, tenant_id, email, password_hash, role, created_at, email_verified_at)
         values ($1, $2, $3, 'x', 'owner', now() - $4::interval, case when $5 then now() end)`,
        [id, tenantId, `signup.${uniq()}@example.com`, age, verified],
      );
      return { id, tenantId };
    }
    const stale = await signup('8 days', false);
    await createSession(db, stale.id);
    const staleWithKey = await signup('8 days', false);
    await createApiKey(db, { tenantId: staleWithKey.tenantId, label: 'in use', createdBy: staleWithKey.id });
    const staleWithLedger = await signup('8 days', false);
    await db.query(
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, note) values ($1, 'credit', 0, 0, 'grant', $2, 'test')`,
      [staleWithLedger.tenantId, `grant-${uniq()}`],
    );
    const young = await signup('6 days', false);
    const verified = await signup('30 days', true);
    // a member of a verified owner's company who never verified (written by hand: invitations verify)
    const memberId = `usr_${uniq()}${uniq()}`;
    await db.query(
      `insert into portal_users (id, tenant_id, email, password_hash, role, created_at) values ($1, $2, $3, 'x', 'developer', now() - interval '8 days')`,
      [memberId, verified.tenantId, `member.${uniq()}@example.com`],
    );
    const users = async () =>
      (
        await db.query('select id from portal_users where id = any($1) order by id', [
          [stale.id, staleWithKey.id, staleWithLedger.id, young.id, verified.id, memberId],
        ])
      ).rows.map((r) => r.id);
    const tenants = async () =>
      (
        await db.query('select id from tenants where id = any($1) order by id', [
          [stale.tenantId, staleWithKey.tenantId, staleWithLedger.tenantId, young.tenantId, verified.tenantId],
        ])
      ).rows.map((r) => r.id);

    // 0: kept forever
    expect((await cleanUp(db, { webhookRetentionDays: 90, unverifiedDays: 0 })).unverifiedUsers).toBe(0);
    expect(await users()).toHaveLength(6);
    for (let pass = 0; pass < 50; pass++) {
      const r = await cleanUp(db, { webhookRetentionDays: 90, unverifiedDays: 7, batch: 2 });
      expect(r.unverifiedUsers).toBeLessThanOrEqual(2);
      if (r.unverifiedUsers < 2) break;
    }
    expect(await users()).toEqual([staleWithKey.id, staleWithLedger.id, young.id, verified.id].sort());
    expect(await tenants()).toEqual([staleWithKey.tenantId, staleWithLedger.tenantId, young.tenantId, verified.tenantId].sort());
    expect((await db.query('select count(*)::int as n from portal_sessions where user_id = $1', [stale.id])).rows[0].n).toBe(0);
  });
});

describe('behind a proxy (PORTAL_TRUSTED_PROXIES)', () => {
  let portal: Portal;
  beforeAll(async () => {
    portal = await startPortal({
      db,
      nc: null,
      reconcileIntervalMs: 0,
      registerWebhook: false,
      env: { PIX_PROVIDER: 'simulator', PORTAL_TRUSTED_PROXIES: '127.0.0.1/32' },
    });
  });
  afterAll(async () => {
    await portal?.close();
  });

  it('the sign-in lock is per (e-mail, address): an attacker from one address is locked, the owner from another signs in', async () => {
    const email = `owner.${uniq()}@example.com`;
    await account(email);
    const attacker = { 'x-forwarded-for': addr() };
    for (let i = 0; i < 5; i++) expect((await login(portal, email, `wrong-password-${i}`, attacker)).status).toBe(401);
    const locked = await login(portal, email, PASSWORD, attacker);
    expect(locked.status).toBe(429);
    expect(locked.text).toContain('Muitas tentativas. Tente de novo em 15 minutos.');
    const owner = await login(portal, email, PASSWORD, { 'x-forwarded-for': addr() });
    expect(owner.status).toBe(303);
    expect(owner.location).toBe('/dashboard');
    // The owner's success does not unlock the attacker's pair.
    expect((await login(portal, email, PASSWORD, attacker)).status).toBe(429);
  });

  it('failures for one e-mail from many addresses: 10 are free, then each waits twice as long as the one before', async () => {
    const email = `spread.${uniq()}@example.com`;
    await account(email);
    for (let i = 0; i < 10; i++) expect((await login(portal, email, `wrong-password-${i}`, { 'x-forwarded-for': addr() })).status).toBe(401);
    // (the latest failure made "just now", so that a slow machine does not outwait the backoff)
    const justNow = () =>
      db.query(`update portal_login_failures set created_at = now() where id = (select max(id) from portal_login_failures where email = $1)`, [email]);
    await justNow();
    const wait = await login(portal, email, PASSWORD, { 'x-forwarded-for': addr() });
    expect(wait.status).toBe(429);
    expect(wait.text).toContain('Muitas tentativas para esta conta. Tente de novo em 1 segundo.');
    const age = (s: number) => db.query(`update portal_login_failures set created_at = created_at - make_interval(secs => $2) where email = $1`, [email, s]);
    await age(1.5);
    expect((await login(portal, email, 'wrong-password-10', { 'x-forwarded-for': addr() })).status).toBe(401);
    await justNow();
    const longer = await login(portal, email, PASSWORD, { 'x-forwarded-for': addr() });
    expect(longer.status).toBe(429);
    expect(longer.text).toContain('Tente de novo em 2 segundos.');
    await age(2.5);
    expect((await login(portal, email, PASSWORD, { 'x-forwarded-for': addr() })).status).toBe(303);
  });

  it('X-Forwarded-For counts only from a trusted proxy, whose right-most untrusted entry is the client', async () => {
    const email = `xff.${uniq()}@example.com`;
    const ips = async () => (await db.query('select ip from portal_login_failures where email = $1 order by id', [email])).rows.map((r) => r.ip);
    const [a, b, c] = [addr(), addr(), addr()];
    // from the proxy (127.0.0.1): the entry it appended
    expect((await login(portal, email, 'wrong password!', { 'x-forwarded-for': `6.6.6.6, ${a}` })).status).toBe(401);
    // a chain of trusted proxies is walked from the right
    expect((await login(portal, email, 'wrong password!', { 'x-forwarded-for': `6.6.6.6, ${b}, 127.0.0.1` })).status).toBe(401);
    // from anyone else (127.0.0.9 reaching the portal directly): forged headers are ignored
    const direct = fromPeer('127.0.0.9');
    try {
      const forged = await login(portal, email, 'wrong password!', { 'x-forwarded-for': c, 'x-forwarded-proto': 'https' }, direct);
      expect(forged.status).toBe(401);
      expect(forged.headers.getSetCookie().join('\n')).not.toMatch(/Secure/);
    } finally {
      await direct.close();
    }
    expect(await ips()).toEqual([a, b, '127.0.0.9']);
  });

  it('Secure cookies and HSTS whenever PORTAL_PUBLIC_URL is https', async () => {
    const https = await startPortal({
      db,
      nc: null,
      reconcileIntervalMs: 0,
      registerWebhook: false,
      env: { PIX_PROVIDER: 'simulator', PORTAL_PUBLIC_URL: 'https://portal.example.com.br' },
    });
    try {
      const r = await new PortalClient(https.url).get('/login');
      expect(r.headers.get('strict-transport-security')).toBe('max-age=31536000');
      expect(r.headers.getSetCookie().find((x) => x.startsWith('catraca_csrf='))).toMatch(/; Secure/);
    } finally {
      await https.close();
    }
    const plain = await new PortalClient(portal.url).get('/login');
    expect(plain.headers.get('strict-transport-security')).toBe(null);
    expect(plain.headers.getSetCookie().find((x) => x.startsWith('catraca_csrf='))).not.toMatch(/Secure/);
  });
});

describe('strings PostgreSQL cannot store: every portal form refuses NUL and control characters, naming the field', () => {
  it('a 400 page naming the field, for every form and field; nothing created, nothing changed', async () => {
    await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n });
    const portal = await startPortal({
      db,
      nc: null,
      reconcileIntervalMs: 0,
      registerWebhook: false,
      signupLimitPerHour: 1000,
      env: { PIX_PROVIDER: 'simulator' },
    });
    try {
      const tag = uniq();
      const email = `fields.${tag}@example.com`;
      const tenant = await account(email);
      await db.query('update portal_users set email_verified_at = now() where email = $1', [email]);
      const c = new PortalClient(portal.url);
      expect((await c.signIn(email)).status).toBe(303);
      const token = await c.csrfOf('/keys');
      expect((await c.post('/keys', { _csrf: token, label: 'kept', scope: 'all' })).status).toBe(303);
      const keyId = (await db.query('select id from api_keys where tenant_id = $1', [tenant])).rows[0].id as string;
      const base: Record<string, Record<string, string>> = {
        '/signup': { email: `new.${tag}@example.com`, password: PASSWORD, org: 'Org' },
        '/login': { email, password: PASSWORD },
        '/keys': {
          label: 'new',
          scope: 'all',
          limit: '10,00',
          limit_reset: 'daily',
          rate_requests: '10',
          rate_interval: 'm',
          expires: '30d',
          models: 'sim/echo',
        },
        '/topup': { amount: '10,00' },
        [`/keys/${keyId}/revoke`]: { confirm: '1' },
        '/logout': { next: '/' },
        '/verify/resend': { next: '/topup' },
        '/reset': { token: 'x'.repeat(43), password: PASSWORD },
      };
      let checked = 0;
      for (const [path, fields] of Object.entries(base)) {
        for (const field of Object.keys(fields)) {
          // a password never reaches PostgreSQL (only its hash): any character but NUL is the user's choice
          for (const bad of field === 'password' ? ['a\u0000b'] : ['a\u0000b', 'a\u0001b', 'line\nbreak', '\u001b[31m', 'del\u007f', 'c1\u0085']) {
            const r = await c.post(path, { _csrf: token, ...fields, [field]: bad });
            expect(r.status, `${path} ${field} ${JSON.stringify(bad)}`).toBe(400);
            expect(r.text, `${path} ${field}`).toContain(`O campo “${field}” contém caracteres que não são permitidos`);
            checked++;
          }
        }
      }
      expect(checked).toBeGreaterThan(60);
      const en = await c.post('/topup?lang=en', { _csrf: token, amount: '1\u00000' });
      expect(en.text).toContain('The field “amount” contains characters that are not allowed');
      expect((await db.query('select count(*)::int as n from portal_users where email like $1', [`new.${tag}@%`])).rows[0].n).toBe(0);
      expect(
        (await db.query('select count(*)::int as n, bool_or(revoked_at is not null) as revoked from api_keys where tenant_id = $1', [tenant])).rows[0],
      ).toEqual({
        n: 1,
        revoked: false,
      });
      expect((await db.query('select count(*)::int as n from pix_charges where tenant_id = $1', [tenant])).rows[0].n).toBe(0);
      expect((await c.get('/dashboard')).status).toBe(200);
    } finally {
      await portal.close();
    }
  });
});
