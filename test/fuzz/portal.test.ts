import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createPool } from '../../src/db/pool.ts';
import { upsertModel } from '../../src/db/models.ts';
import { requestUrl, startPortal, type Portal } from '../../src/portal/server.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { PortalClient, sinkMailbox } from '../portal/client.ts';
import { rawRequest } from './raw-http.ts';

// Property-based fuzzing of the portal's forms (sign-up, sign-in, key creation, top-up) and URLs:
// random field values with NUL, very long strings, repeated fields, malformed URL-encoding; odd
// request targets (`//`, `%zz`, very long paths, absolute-form) and cookies. Each answer is a
// redirect, a 4xx, or the form re-rendered with its error — never a 500 — and the portal keeps
// answering (it runs in this process: a crash would end the test run).

const db = createPool(process.env.DATABASE_URL!, 4);
let portal: Portal;
let port: number;
let sink: MailSink;
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
const runs = (n: number) => ({ numRuns: Number(process.env.FUZZ_RUNS ?? n), seed: SEED, endOnFailure: true });
const uniq = () => Math.random().toString(36).slice(2, 10);
// The fuzzer's requests come from an address of their own (behind a trusted proxy): its many
// sign-ins and sign-ups must not use up the per-address budgets of other test files, which share
// the database and come from 127.0.0.1.
const address = () => `198.51.100.${1 + Math.floor(Math.random() * 250)}`;
const FROM = { 'x-forwarded-for': address() };

beforeAll(async () => {
  await upsertModel(db, { id: 'sim/echo', pool: 'sim', upstream_model: 'echo', input_price: 1_000_000n, output_price: 2_000_000n });
  sink = await startMailSink();
  portal = await startPortal({
    db,
    nc: null,
    reconcileIntervalMs: 0,
    signupLimitPerHour: 100_000,
    trustedProxies: true,
    registerWebhook: false,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url },
  });
  port = Number(new URL(portal.url).port);
  console.log(`fuzz seed ${SEED}`);
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await db.end();
});

async function expectUp() {
  const r = await fetch(`${portal.url}/healthz`);
  expect(r.status).toBe(200);
}

/** A redirect, the check-your-e-mail page of a sign-up, or a 4xx that is the form again (with its error) or the invalid-form page; never a 5xx. */
function expectHandled(r: { status: number; text: string }, allowed: number[]) {
  expect(allowed, `status ${r.status}: ${r.text.slice(0, 300)}`).toContain(r.status);
  if (r.status === 200) expect(r.text).toContain('data-testid="check-email"');
  if (r.status === 400 || r.status === 401 || r.status === 409 || r.status === 429) {
    const reRendered = r.text.includes('data-testid="error"') && r.text.includes('<form');
    expect(reRendered || r.text.includes('NUL'), `the form re-rendered with its error, or the invalid-form page: ${r.text.slice(0, 200)}`).toBe(true);
  }
}

// field values: anything a browser or a script could post
const nasty = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ minLength: 1, maxLength: 10 }).map((s) => `${s}\u0000${s}`),
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    '%zz',
    '%',
    '<script>alert(1)</script>',
    "' or 1=1 --",
    '\ud800',
    '١٢٣',
    '12,34',
    '1.000,00',
    '-5',
    '1e9',
    'NaN',
    'Infinity',
    '0x10',
  ),
  fc.integer({ min: 101, max: 20_000 }).map((n) => 'é'.repeat(n)),
);
const maybeRepeated = fc.oneof(nasty, fc.array(nasty, { minLength: 2, maxLength: 3 }));

/** A new account, signed in from an address of its own: the sign-in fuzz may have spent FROM's sign-in budget (LOGIN_MAX_PER_IP). */
async function signedIn(): Promise<PortalClient> {
  let from = address();
  while (from === FROM['x-forwarded-for']) from = address();
  const c = new PortalClient(portal.url, { 'x-forwarded-for': from }, { mailbox: sinkMailbox(sink) });
  const r = await c.signUp(`fuzz.${uniq()}@example.com`);
  expect(r.status).toBe(303);
  return c;
}

describe('fuzz: portal forms', () => {
  it('sign-up with random fields: the check-your-e-mail page, or the form again with its error', async () => {
    await fc.assert(
      fc.asyncProperty(fc.record({ email: maybeRepeated, password: maybeRepeated, org: maybeRepeated }), fc.boolean(), async (f, validEmail) => {
        const c = new PortalClient(portal.url, FROM);
        const token = await c.csrfOf('/signup');
        const email = validEmail ? `f.${uniq()}@example.com` : f.email;
        const r = await c.post('/signup', { _csrf: token, email, password: f.password, org: f.org });
        expectHandled(r, [200, 400, 413, 429]);
      }),
      runs(60),
    );
    await expectUp();
  }, 60000);

  it('sign-in with random fields: 303, 401/429 with the form, or 400', async () => {
    await fc.assert(
      fc.asyncProperty(maybeRepeated, maybeRepeated, async (email, password) => {
        const anon = new PortalClient(portal.url, FROM);
        const token = await anon.csrfOf('/login');
        const r = await anon.post('/login', { _csrf: token, email, password });
        expectHandled(r, [303, 400, 401, 413, 429]);
      }),
      runs(50),
    );
    await expectUp();
  }, 60000);

  it('key creation with random fields: 303 (created) or the keys page with its error', async () => {
    const c = await signedIn();
    const before = (await db.query('select count(*)::int as n from api_keys')).rows[0].n as number;
    let created = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record(
          {
            label: maybeRepeated,
            scope: fc.oneof(fc.constantFrom('all', 'some'), nasty),
            models: fc.oneof(fc.constant('sim/echo'), maybeRepeated),
            limit: maybeRepeated,
            limit_reset: fc.oneof(fc.constantFrom('daily', 'weekly', 'monthly'), nasty),
            rate_requests: fc.oneof(fc.integer({ min: -5, max: 2_000_000 }).map(String), nasty),
            rate_interval: fc.oneof(fc.constantFrom('s', 'm', 'h', 'd'), nasty),
            expires: fc.oneof(fc.constantFrom('', '1d', '7d', '30d', '90d', '365d'), nasty),
          },
          { requiredKeys: ['label'] },
        ),
        async (f) => {
          const token = PortalClient.csrf((await c.get('/keys')).text);
          const r = await c.post('/keys', { _csrf: token, ...f } as Record<string, string | string[]>);
          expectHandled(r, [303, 400, 413]);
          if (r.status === 303) {
            created++;
            expect(r.location).toMatch(/^\/keys\?created=[A-Za-z0-9_-]{22}$/);
          }
        },
      ),
      runs(60),
    );
    const after = (await db.query('select count(*)::int as n from api_keys')).rows[0].n as number;
    expect(after - before).toBeGreaterThanOrEqual(created); // (other files create keys meanwhile)
    await expectUp();
  }, 60000);

  it('top-up amounts: 303 to the charge, or the form with its error', async () => {
    const c = await signedIn();
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          maybeRepeated,
          fc.integer({ min: -100, max: 10_000 }).map((n) => `${n},00`),
        ),
        async (amount) => {
          const token = PortalClient.csrf((await c.get('/topup')).text);
          const r = await c.post('/topup', { _csrf: token, amount });
          expectHandled(r, [303, 400, 413, 429]);
          if (r.status === 303) expect(r.location).toMatch(/^\/topup\/[a-zA-Z0-9]{26,35}$/);
        },
      ),
      runs(50),
    );
    await expectUp();
  }, 60000);

  it('Dados fiscais with random fields: 303 with a row the database accepts, or the form again with its error (issue 28)', async () => {
    const c = await signedIn();
    const valid = {
      document: '11.444.777/0001-61',
      name: 'Cliente',
      cep: '88015-100',
      street: 'Rua A',
      number: '1',
      district: 'Centro',
      city_code: '4205407',
      uf: 'SC',
    };
    // each field valid or nasty, so that one wrong field at a time is tried as well as everything wrong
    const field = (v: string) => fc.oneof(fc.constant(v), maybeRepeated);
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          ...Object.fromEntries(Object.entries(valid).map(([k, v]) => [k, field(v)])),
          email: fc.oneof(fc.constantFrom('', 'notas@cliente.example'), nasty),
          complement: fc.oneof(fc.constant(''), nasty),
          municipal_registration: fc.oneof(fc.constantFrom('', '12345'), nasty),
        }),
        async (f) => {
          const token = PortalClient.csrf((await c.get('/dados-fiscais')).text);
          const r = await c.post('/dados-fiscais', { _csrf: token, ...f } as Record<string, string | string[]>);
          expectHandled(r, [303, 400, 413]);
          if (r.status === 303) expect(r.location).toBe('/dados-fiscais?saved=1');
        },
      ),
      runs(60),
    );
    await expectUp();
  }, 60000);

  it('malformed URL-encoding and NUL in raw form bodies: 400 or the form again, never a 500', async () => {
    const c = await signedIn();
    const enc = fc.oneof(
      fc.constantFrom('%', '%z', '%zz', '%%', '%00', '%E0%A4%A', '%ED%A0%80', '%FF', '+', '&&', '==', '%0', '%u0041', '%C0%AF'),
      fc.string({ maxLength: 20 }),
    );
    const body = fc.array(
      fc.tuple(
        fc.constantFrom('email', 'password', 'org', 'label', 'amount', 'limit', 'scope', 'models', '%zz', ''),
        fc.array(enc, { maxLength: 4 }).map((a) => a.join('')),
      ),
      { maxLength: 6 },
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('/signup', '/login', '/keys', '/topup'), body, async (path, fields) => {
        const page = await c.get(path === '/keys' || path === '/topup' ? path : '/dashboard');
        const token = PortalClient.csrf(page.text);
        const cookie = [...c.cookies].map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('; ');
        const raw = [`_csrf=${token}`, ...fields.map(([k, v]) => `${k}=${v}`)].join('&');
        const r = await rawRequest({
          port,
          path,
          headers: [
            ['content-type', 'application/x-www-form-urlencoded'],
            ['cookie', cookie],
            ['x-forwarded-for', FROM['x-forwarded-for']],
          ],
          body: raw,
        });
        // (signed in, /signup still signs up a new account (200) and /login still checks the credentials: 401)
        expect([200, 303, 400, 401, 413, 429], `${path} ${raw.slice(0, 200)} → ${r.status} ${r.body.toString().slice(0, 200)}`).toContain(r.status);
      }),
      runs(80),
    );
    // NUL in any field of any form: the invalid-form page
    for (const path of ['/keys', '/topup']) {
      const token = PortalClient.csrf((await c.get(path)).text);
      const r = await c.post(path, { _csrf: token, label: 'a\u0000b', amount: '10\u0000', limit: '\u0000' });
      expect(r.status).toBe(400);
      expect(r.text).toContain('NUL');
    }
    const anon = new PortalClient(portal.url, FROM);
    const t = await anon.csrfOf('/signup');
    const r = await anon.post('/signup', { _csrf: t, email: `nul.${uniq()}@example.com`, password: 'correct horse battery', org: 'Org\u0000' });
    expect(r.status).toBe(400);
    expect(r.text).toContain('NUL');
    const l = await anon.post('/login', { _csrf: PortalClient.csrf(r.text) || t, email: 'a\u0000@example.com', password: 'x'.repeat(12) });
    expect(l.status).toBe(400);
    await expectUp();
  }, 60000);
});

describe('fuzz: portal URLs and cookies', () => {
  it('odd request targets: never a 500, and the portal stays up', async () => {
    const c = await signedIn();
    const cookie = [...c.cookies].map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('; ');
    const target = fc.oneof(
      fc.constantFrom(
        '//',
        '///',
        '//%zz',
        '//[::1',
        '//a:99999/x',
        '//evil.example/keys',
        '/%zz',
        '/%',
        '/%00',
        '/keys/%00/revoke',
        '/keys/%zz/revoke',
        '/topup/%zz',
        '/topup/%00/status',
        '/static/../../etc/passwd',
        '/static/%2e%2e/%2e%2e/etc/passwd',
        '/?lang=%zz',
        '/login?lang=%00',
        '/ledger?page=%00',
        '/ledger?page=-1',
        '/ledger?page=1e999',
        '/keys?created=%00',
        '/keys?created=%zz',
        '/webhooks/pix/%zz',
        '/webhooks/pix/',
        'http://portal/dashboard',
        'http://[::1/x',
        '*',
        '/dashboard#frag',
        '/models?%zz=%zz',
        '/dashboard?from=%00&to=%zz',
        '/dashboard?days=-1',
        '/exports/statement.csv?from=2025-02-30',
        '/exports/usage.csv?from=%zz&to=%00',
      ),
      fc.integer({ min: 1000, max: 15_000 }).map((n) => `/${'a'.repeat(n)}`),
      fc.string({ maxLength: 30 }).map((s) => `/${encodeURIComponent(s)}`),
      fc.webPath().map((p) => p || '/'),
      fc.string({ unit: 'binary-ascii', maxLength: 20 }).map((s) => `/${s.replace(/[\s]/g, '')}`),
    );
    await fc.assert(
      fc.asyncProperty(target, fc.constantFrom('GET', 'POST', 'HEAD', 'DELETE'), fc.boolean(), async (path, method, withSession) => {
        const r = await rawRequest({
          port,
          method,
          path,
          headers: [['x-forwarded-for', FROM['x-forwarded-for']], ...(withSession ? [['cookie', cookie] as [string, string]] : [])],
          body: method === 'POST' ? '_csrf=x' : undefined,
          timeoutMs: 10000,
        });
        expect(r.timedOut).toBe(false);
        // 0: node's HTTP parser refused the request line and closed the connection
        expect(r.status === 0 || (r.status >= 200 && r.status < 500), `${method} ${path.slice(0, 80)} → ${r.status} ${r.body.toString().slice(0, 120)}`).toBe(
          true,
        );
      }),
      runs(150),
    );
    await expectUp();
    expect((await c.get('/dashboard')).status).toBe(200);
  }, 60000);

  it('random cookies: never a 500', async () => {
    const value = fc.oneof(fc.string({ maxLength: 60 }), fc.constantFrom('%00', '%zz', '%', '\u0000'.repeat(3), 'x'.repeat(5000)));
    await fc.assert(
      fc.asyncProperty(value, value, value, async (session, csrf, lang) => {
        const cookie = `catraca_session=${session}; catraca_csrf=${csrf}; catraca_lang=${lang}`.replace(/[\r\n]/g, '');
        const r = await rawRequest({ port, method: 'GET', path: '/dashboard', headers: [['cookie', Buffer.from(cookie, 'latin1')]], timeoutMs: 10000 });
        expect(r.status === 0 || (r.status >= 200 && r.status < 500), `${r.status}`).toBe(true);
      }),
      runs(60),
    );
    await expectUp();
  }, 60000);

  it('requestUrl keeps the path as sent and refuses nothing usable', () => {
    expect(requestUrl('//evil.example/keys')?.pathname).toBe('//evil.example/keys');
    expect(requestUrl('//')?.pathname).toBe('//');
    expect(requestUrl('//%zz')?.pathname).toBe('//%zz');
    expect(requestUrl('/a?b=%zz')?.searchParams.get('b')).toBe('%zz');
    expect(requestUrl('http://other.example/x?y=1')?.href).toBe('http://portal/x?y=1');
    expect(requestUrl('*')).toBe(null);
    expect(requestUrl(undefined)?.pathname).toBe('/');
  });
});
