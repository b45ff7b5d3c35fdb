// Issue 20: "every portal action checks the role on the server". A table of every route of the
// portal's Hono app (read from app.routes, so a route added without a row here fails) × who asks
// (no session, owner, admin, billing, developer) → the HTTP status the server answers to a direct
// request. Each cell runs against a tenant of its own (written to the database: four members with
// sessions, the owner's key, an open charge, a pending invitation, a developer to act on), so a
// cell that changes something (revokes, removes, leaves) cannot decide another's answer.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/db/keys.ts';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { createSession } from '../../src/portal/auth.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { newLinkToken } from '../../src/portal/email-links.ts';
import { ROLES, type Role } from '../../src/db/members.ts';
import { declaredPermission, endpointsOf } from '../../src/portal/authorize.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { PortalClient } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 4);
const WEBHOOK_SECRET = randomBytes(24).toString('base64url');
const uniq = () => randomBytes(6).toString('hex');
let sink: MailSink;
let portal: Portal;
let passwordHash: string;

beforeAll(async () => {
  passwordHash = await hashPassword('correct horse battery');
  sink = await startMailSink();
  portal = await startPortal({
    db,
    nc: null,
    reconcileIntervalMs: 0,
    registerWebhook: false,
    signupLimitPerHour: 100000,
    // the simulator as PSP: dev mode, so the development routes are there too
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url, PIX_WEBHOOK_SECRET: WEBHOOK_SECRET },
  });
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await db.end();
});

const WHO = ['anonymous', ...ROLES] as const;
type Who = (typeof WHO)[number];

interface World {
  tenantId: string;
  users: Record<Role, string>;
  client: Record<Who, PortalClient>;
  csrf: Record<Who, string>;
  ownerKey: string;
  txid: string;
  invitationId: string;
  invitationToken: string;
  /** a developer none of the four is: the member the members routes act on */
  target: string;
}

async function addUser(tenantId: string, role: Role): Promise<string> {
  const id = `usr_${uniq()}`;
  await db.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())`, [
    id,
    tenantId,
    `${role}.${uniq()}@example.com`,
    passwordHash,
    role,
  ]);
  return id;
}

async function world(): Promise<World> {
  const tenantId = (await createTenant(db, `route-roles-${uniq()}`)).id;
  const users = {} as Record<Role, string>;
  const client = {} as Record<Who, PortalClient>;
  const csrf = {} as Record<Who, string>;
  for (const role of ROLES) {
    users[role] = await addUser(tenantId, role);
    const s = await createSession(db, users[role]);
    client[role] = new PortalClient(portal.url);
    client[role].cookies.set('catraca_session', s.token);
    csrf[role] = s.csrf;
  }
  // no session: the double-submit token of the sign-in form
  client.anonymous = new PortalClient(portal.url);
  csrf.anonymous = await client.anonymous.csrfOf('/login');
  const ownerKey = (await createApiKey(db, { tenantId, label: 'owner-key', createdBy: users.owner })).record.id;
  const txid = randomBytes(16).toString('hex');
  await db.query(
    `insert into pix_charges (txid, tenant_id, amount_micros, status, provider, br_code, expires_at) values ($1, $2, 10000000, 'ATIVA', 'simulator', '000201', now() + interval '1 hour')`,
    [txid, tenantId],
  );
  const link = newLinkToken();
  const invitationId = `inv_${uniq()}`;
  await db.query(
    `insert into portal_invitations (id, token_hash, tenant_id, email, role, invited_by, expires_at) values ($1, $2, $3, $4, 'developer', $5, now() + interval '1 day')`,
    [invitationId, link.hash, tenantId, `invited.${uniq()}@example.com`, users.owner],
  );
  const target = await addUser(tenantId, 'developer');
  return { tenantId, users, client, csrf, ownerKey, txid, invitationId, invitationToken: link.token, target };
}

type Ask = (w: World, who: Who) => Promise<{ status: number }>;
const get =
  (path: (w: World) => string): Ask =>
  (w, who) =>
    w.client[who].get(path(w));
const post =
  (path: (w: World) => string, form: (w: World) => Record<string, string> = () => ({})): Ask =>
  (w, who) =>
    w.client[who].post(path(w), { _csrf: w.csrf[who], ...form(w) });
const webhook =
  (path: string, method: 'GET' | 'POST'): Ask =>
  async () => {
    const res = await fetch(`${portal.url}${path.replace(':secret', WEBHOOK_SECRET)}`, {
      method,
      headers: method === 'POST' ? { 'content-type': 'application/json' } : {},
      body: method === 'POST' ? '{"pix":[]}' : undefined,
    });
    await res.arrayBuffer();
    return { status: res.status };
  };

/** [anonymous, owner, admin, billing, developer] */
type Row = [number, number, number, number, number];
interface Case {
  /** the route as registered: method and path */
  route: string;
  ask: Ask;
  expect: Row;
}

const ALL_200: Row = [200, 200, 200, 200, 200];
const CASES: Case[] = [
  // public: no session needed (static files, the PSP's webhook, sign-in pages, e-mailed links)
  { route: 'GET /static/portal.js', ask: get(() => '/static/portal.js'), expect: ALL_200 },
  { route: 'GET /static/portal.css', ask: get(() => '/static/portal.css'), expect: ALL_200 },
  ...[
    '/webhooks/pix/:secret',
    '/webhooks/pix/:secret/',
    '/webhooks/pix/:secret/pix',
    '/webhooks/pix/:secret/pix/',
    // Pix Automático: recurrences and recurring charges
    '/webhooks/pix/:secret/rec',
    '/webhooks/pix/:secret/rec/',
    '/webhooks/pix/:secret/cobr',
    '/webhooks/pix/:secret/cobr/',
  ].flatMap((p): Case[] => [
    // the right secret, a notice without payments: refused as a bad body (a wrong secret would be 401, then 429)
    { route: `POST ${p}`, ask: webhook(p, 'POST'), expect: [400, 400, 400, 400, 400] },
    { route: `ALL ${p}`, ask: webhook(p, 'GET'), expect: [405, 405, 405, 405, 405] },
  ]),
  { route: 'ALL /healthz', ask: get(() => '/healthz'), expect: ALL_200 },
  { route: 'GET /', ask: get(() => '/'), expect: [303, 303, 303, 303, 303] },
  { route: 'POST /', ask: post(() => '/'), expect: [303, 303, 303, 303, 303] },
  { route: 'GET /signup', ask: get(() => '/signup'), expect: [200, 303, 303, 303, 303] },
  {
    route: 'POST /signup',
    ask: post(
      () => '/signup',
      () => ({ email: 'not-an-address', password: 'x' }),
    ),
    expect: [400, 400, 400, 400, 400],
  },
  { route: 'GET /login', ask: get(() => '/login'), expect: [200, 303, 303, 303, 303] },
  {
    route: 'POST /login',
    ask: post(
      () => '/login',
      () => ({ email: `nobody.${uniq()}@example.com`, password: 'wrong password' }),
    ),
    expect: [401, 401, 401, 401, 401],
  },
  { route: 'POST /logout', ask: post(() => '/logout'), expect: [303, 303, 303, 303, 303] },
  { route: 'GET /verify', ask: get(() => '/verify?token=x'), expect: [400, 400, 400, 400, 400] },
  { route: 'GET /reset', ask: get(() => '/reset?token=x'), expect: [400, 400, 400, 400, 400] },
  {
    route: 'POST /reset',
    ask: post(
      () => '/reset',
      () => ({ token: 'x', password: 'long enough password' }),
    ),
    expect: [400, 400, 400, 400, 400],
  },
  // an invitation is accepted without a session; a signed-in browser is refused (bound to the invited address)
  { route: 'GET /invite', ask: get((w) => `/invite?token=${w.invitationToken}`), expect: [200, 403, 403, 403, 403] },
  {
    route: 'POST /invite',
    ask: post(
      () => '/invite',
      (w) => ({ token: w.invitationToken, password: 'correct horse battery' }),
    ),
    expect: [303, 403, 403, 403, 403],
  },
  { route: 'GET /dev/mail', ask: get(() => '/dev/mail'), expect: ALL_200 },

  // usage: every role
  { route: 'GET /dashboard', ask: get(() => '/dashboard'), expect: [303, 200, 200, 200, 200] },
  { route: 'GET /models', ask: get(() => '/models'), expect: [303, 200, 200, 200, 200] },
  // batches: every role sees the page; the result files (prompts and answers) not billing — no such batch: 404
  { route: 'GET /batches', ask: get(() => '/batches'), expect: [303, 200, 200, 200, 200] },
  {
    route: 'GET /batches/:id{(?:msg)?batch_[0-9a-f]{24}}/:file{input|output|errors|results}',
    ask: get(() => `/batches/batch_${'0'.repeat(24)}/output`),
    expect: [303, 404, 404, 403, 404],
  },
  // cancelling a batch: the roles that download its files
  {
    route: 'GET /batches/:id{(?:msg)?batch_[0-9a-f]{24}}/cancel',
    ask: get(() => `/batches/batch_${'0'.repeat(24)}/cancel`),
    expect: [303, 404, 404, 403, 404],
  },
  {
    route: 'POST /batches/:id{(?:msg)?batch_[0-9a-f]{24}}/cancel',
    ask: post(() => `/batches/batch_${'0'.repeat(24)}/cancel`),
    expect: [303, 404, 404, 403, 404],
  },
  // the statement and top-ups: owner and billing
  { route: 'GET /ledger', ask: get(() => '/ledger'), expect: [303, 200, 403, 200, 403] },
  { route: 'GET /exports/statement.csv', ask: get(() => '/exports/statement.csv'), expect: [303, 200, 403, 200, 403] },
  { route: 'GET /exports/usage.csv', ask: get(() => '/exports/usage.csv'), expect: [303, 200, 403, 200, 403] },
  // notifications: owner and billing (ids of another tenant's or no endpoint/delivery: 404)
  { route: 'GET /notifications', ask: get(() => '/notifications'), expect: [303, 200, 403, 200, 403] },
  // an empty form: no threshold, no e-mail (saved)
  { route: 'POST /notifications/settings', ask: post(() => '/notifications/settings'), expect: [303, 303, 403, 303, 403] },
  { route: 'POST /notifications/endpoints', ask: post(() => '/notifications/endpoints'), expect: [303, 400, 403, 400, 403] },
  ...['rotate', 'toggle', 'delete'].map(
    (action): Case => ({
      route: `POST /notifications/endpoints/:id{ep_[a-z0-9]{10,40}}/${action}`,
      ask: post(() => `/notifications/endpoints/ep_nosuchendpoint/${action}`),
      expect: [303, 404, 403, 404, 403],
    }),
  ),
  {
    route: 'POST /notifications/deliveries/:id{[0-9]{1,18}}/replay',
    ask: post(() => '/notifications/deliveries/999999999/replay'),
    expect: [303, 404, 403, 404, 403],
  },
  // notas fiscais: owner and billing (an empty profile form is refused; no such note: 404)
  { route: 'GET /dados-fiscais', ask: get(() => '/dados-fiscais'), expect: [303, 200, 403, 200, 403] },
  { route: 'POST /dados-fiscais', ask: post(() => '/dados-fiscais'), expect: [303, 400, 403, 400, 403] },
  { route: 'GET /notas-fiscais', ask: get(() => '/notas-fiscais'), expect: [303, 200, 403, 200, 403] },
  ...['xml', 'pdf'].map(
    (file): Case => ({
      route: `GET /notas-fiscais/:id{inv_[0-9a-f]{32}}/${file}`,
      ask: get(() => `/notas-fiscais/inv_00000000000000000000000000000000/${file}`),
      expect: [303, 404, 403, 404, 403],
    }),
  ),
  { route: 'GET /topup', ask: get(() => '/topup'), expect: [303, 200, 403, 200, 403] },
  {
    route: 'POST /topup',
    ask: post(
      () => '/topup',
      () => ({ amount: '10,00' }),
    ),
    expect: [303, 303, 403, 303, 403],
  },
  // Recarga automática: a refused form (no periodicity) and nothing to cancel
  { route: 'GET /topup/auto', ask: get(() => '/topup/auto'), expect: [303, 200, 403, 200, 403] },
  {
    route: 'POST /topup/auto',
    ask: post(
      () => '/topup/auto',
      () => ({ target: '100,00' }),
    ),
    expect: [303, 400, 403, 400, 403],
  },
  { route: 'POST /topup/auto/cancel', ask: post(() => '/topup/auto/cancel'), expect: [303, 409, 403, 409, 403] },
  { route: 'GET /topup/:txid{[a-zA-Z0-9]{26,35}}', ask: get((w) => `/topup/${w.txid}`), expect: [303, 200, 403, 200, 403] },
  { route: 'GET /topup/:txid{[a-zA-Z0-9]{26,35}}/status', ask: get((w) => `/topup/${w.txid}/status`), expect: [401, 200, 403, 200, 403] },
  { route: 'POST /topup/:txid{[a-zA-Z0-9]{26,35}}/simulate', ask: post((w) => `/topup/${w.txid}/simulate`), expect: [303, 303, 403, 303, 403] },
  // one's own account: every role (the address is verified: "send again" goes back to /topup)
  { route: 'POST /verify/resend', ask: post(() => '/verify/resend'), expect: [303, 303, 303, 303, 303] },
  { route: 'GET /account', ask: get(() => '/account'), expect: [303, 200, 200, 200, 200] },
  // leaving: anyone but the last owner
  { route: 'POST /account/leave', ask: post(() => '/account/leave'), expect: [303, 409, 303, 303, 303] },
  // keys: owner, admin, developer — the owner's key does not exist for a developer
  { route: 'GET /keys', ask: get(() => '/keys'), expect: [303, 200, 200, 403, 200] },
  {
    route: 'POST /keys',
    ask: post(
      () => '/keys',
      () => ({ label: 'k', scope: 'all' }),
    ),
    expect: [303, 303, 303, 403, 303],
  },
  { route: 'GET /keys/:id{[A-Za-z0-9_-]{1,64}}/revoke', ask: get((w) => `/keys/${w.ownerKey}/revoke`), expect: [303, 200, 200, 403, 404] },
  { route: 'POST /keys/:id{[A-Za-z0-9_-]{1,64}}/revoke', ask: post((w) => `/keys/${w.ownerKey}/revoke`), expect: [303, 200, 200, 403, 404] },
  // members: owner and admin (acting on a developer)
  { route: 'GET /members', ask: get(() => '/members'), expect: [303, 200, 200, 403, 403] },
  {
    route: 'POST /members/invite',
    ask: post(
      () => '/members/invite',
      () => ({ email: `new.${uniq()}@example.com`, role: 'developer' }),
    ),
    expect: [303, 303, 303, 403, 403],
  },
  {
    route: 'POST /members/invitations/:id{[A-Za-z0-9_-]{1,64}}/revoke',
    ask: post((w) => `/members/invitations/${w.invitationId}/revoke`),
    expect: [303, 303, 303, 403, 403],
  },
  {
    route: 'POST /members/:id{[A-Za-z0-9_-]{1,64}}/role',
    ask: post(
      (w) => `/members/${w.target}/role`,
      () => ({ role: 'billing' }),
    ),
    expect: [303, 303, 303, 403, 403],
  },
  { route: 'GET /members/:id{[A-Za-z0-9_-]{1,64}}/remove', ask: get((w) => `/members/${w.target}/remove`), expect: [303, 200, 200, 403, 403] },
  { route: 'POST /members/:id{[A-Za-z0-9_-]{1,64}}/remove', ask: post((w) => `/members/${w.target}/remove`), expect: [303, 303, 303, 403, 403] },
];

/** The same routes acting on an owner: only an owner may (an admin manages members who are not owners). */
const ON_AN_OWNER: Case[] = [
  {
    route: 'POST /members/:id{[A-Za-z0-9_-]{1,64}}/role',
    ask: post(
      (w) => `/members/${w.users.owner}/role`,
      () => ({ role: 'admin' }),
    ),
    // the owner demoting themself, the only owner: 409
    expect: [303, 409, 403, 403, 403],
  },
  { route: 'GET /members/:id{[A-Za-z0-9_-]{1,64}}/remove', ask: get((w) => `/members/${w.users.owner}/remove`), expect: [303, 200, 403, 403, 403] },
  { route: 'POST /members/:id{[A-Za-z0-9_-]{1,64}}/remove', ask: post((w) => `/members/${w.users.owner}/remove`), expect: [303, 409, 403, 403, 403] },
  {
    route: 'POST /members/invite',
    ask: post(
      () => '/members/invite',
      () => ({ email: `owner.${uniq()}@example.com`, role: 'owner' }),
    ),
    expect: [303, 303, 403, 403, 403],
  },
];

async function run(cases: Case[]) {
  const got: Record<string, Record<Who, number>> = {};
  const want: Record<string, Record<Who, number>> = {};
  for (const c of cases) {
    got[c.route] = {} as Record<Who, number>;
    want[c.route] = Object.fromEntries(WHO.map((who, i) => [who, c.expect[i]])) as Record<Who, number>;
    for (const who of WHO) got[c.route][who] = (await c.ask(await world(), who)).status;
  }
  expect(got).toEqual(want);
}

describe('every portal route × role: the status the server answers', () => {
  it('the table names exactly the routes of the app (wildcard paths included), and every route declares its permission (src/portal/roles.ts)', () => {
    const routes = portal.app.routes;
    const endpoints = endpointsOf(routes).map((e) => `${e.method} ${e.path}`);
    expect([...new Set(CASES.map((c) => c.route))].sort()).toEqual([...endpoints].sort());
    // every handler not marked middleware is an endpoint, a wildcard path (`/x/*`, `*`) as much as any other
    const undeclared = endpointsOf(routes).filter((e) => declaredPermission(routes, e.method, e.path) === undefined);
    expect(undeclared).toEqual([]);
    expect(undeclared.filter((e) => e.path.endsWith('*'))).toEqual([]);
  });

  it('direct requests, one tenant per cell', { timeout: 180000 }, async () => {
    await run(CASES);
  });

  it('acting on an owner', async () => {
    await run(ON_AN_OWNER);
  });
});
