// Issue 20, item 1: a tenant's team. Invitations by e-mail link (expiring, single use, bound to the
// invited address, revocable), roles checked on the server, the last owner, sessions that end on
// removal, keys that record who created them. Through the portal's HTTP, with the e-mails read
// from an SMTP sink; fixtures that only need to exist (a second owner) are written to the database.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/db/keys.ts';
import { derivedRoleUrl } from '../../src/db/roles.ts';
import { createPool } from '../../src/db/pool.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { configureLogging } from '../../src/log.ts';
import { type MailSink, startMailSink } from '../../src/mail/sink.ts';
import { createSession } from '../../src/portal/auth.ts';
import { hashPassword } from '../../src/web/sign-in.ts';
import { changeRole, removeMember } from '../../src/portal/members.ts';
import type { Role } from '../../src/db/members.ts';
import { startPortal, type Portal } from '../../src/portal/server.ts';
import { PortalClient, sinkMailbox } from './client.ts';

const db = createPool(process.env.DATABASE_URL!, 6);
const uniq = () => Math.random().toString(36).slice(2, 10);
const PASSWORD = 'correct horse battery';
const logged: string[] = [];
let sink: MailSink;
let portal: Portal;
let passwordHash: string;
const client = () => new PortalClient(portal.url, {}, { mailbox: sinkMailbox(sink) });
const one = async (sql: string, params: unknown[]) => (await db.query(sql, params)).rows[0];
const count = async (sql: string, params: unknown[]) => (await one(sql, params)).n as number;

beforeAll(async () => {
  configureLogging({ format: 'json', level: 'info', write: (line) => void logged.push(line) });
  passwordHash = await hashPassword(PASSWORD);
  sink = await startMailSink();
  portal = await startPortal({
    db,
    nc: null,
    reconcileIntervalMs: 0,
    registerWebhook: false,
    signupLimitPerHour: 1000,
    env: { PIX_PROVIDER: 'simulator', SMTP_URL: sink.url, SMTP_FROM: 'catraca <no-reply@catraca.test>' },
  });
});
afterAll(async () => {
  await portal?.close();
  await sink?.close();
  await db.end();
  configureLogging({ format: undefined, level: undefined, write: undefined });
});

/** A new tenant's owner, signed up through the portal (address verified by its link). */
async function newOwner() {
  const c = client();
  const email = `owner.${uniq()}@example.com`;
  expect((await c.signUp(email)).status).toBe(303);
  const user = await one('select id, tenant_id from portal_users where email = $1', [email]);
  return { c, email, id: user.id as string, tenantId: user.tenant_id as string };
}

/** The link of the n-th invitation e-mailed to this address (waiting for it: mail goes out in the background). */
async function invitationLink(email: string, nth = 1): Promise<string> {
  const isInvite = (x: { to: string[]; text: string }) => x.to.includes(email) && /\/invite\?token=/.test(x.text);
  await sink.waitFor(() => sink.messages().filter(isInvite).length >= nth);
  const m = sink.messages().filter(isInvite)[nth - 1];
  const url = new URL(/https?:\/\/\S+\/invite\?token=[A-Za-z0-9_-]{43}(&lang=en)?/.exec(m.text)![0]);
  return url.pathname + url.search;
}

async function invite(by: PortalClient, email: string, role: Role) {
  return by.post('/members/invite', { _csrf: await by.csrfOf('/members'), email, role });
}

/** Opens the link in a browser of its own and accepts it with a password: the new member, signed in. */
async function accept(link: string) {
  const c = client();
  const page = await c.get(link);
  expect(page.status).toBe(200);
  const res = await c.post('/invite', { _csrf: PortalClient.csrf(page.text), token: new URL(link, portal.url).searchParams.get('token')!, password: PASSWORD });
  return { c, res };
}

/** Invites and accepts: a member of the owner's tenant with this role. */
async function member(owner: PortalClient, role: Role) {
  const email = `${role}.${uniq()}@example.com`;
  expect((await invite(owner, email, role)).status).toBe(303);
  const { c, res } = await accept(await invitationLink(email));
  expect(res.status).toBe(303);
  const id = (await one('select id from portal_users where email = $1', [email])).id as string;
  return { c, email, id };
}

/** A member written straight to the database, with a session: for what only needs to exist. */
async function memberInDb(tenantId: string, role: Role) {
  const email = `${role}.db.${uniq()}@example.com`;
  const id = `usr_${uniq()}${uniq()}`;
  await db.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())`, [
    id,
    tenantId,
    email,
    passwordHash,
    role,
  ]);
  const c = client();
  c.cookies.set('catraca_session', (await createSession(db, id)).token);
  return { c, email, id };
}

const roleOf = async (id: string) => (await one('select role from portal_users where id = $1', [id]))?.role ?? null;
const owners = (tenantId: string) => count(`select count(*)::int as n from portal_users where tenant_id = $1 and role = 'owner'`, [tenantId]);

describe('invitations by e-mail link', () => {
  it('the owner invites; the link (stored as its SHA-256) makes the invited address a verified member, once', async () => {
    const o = await newOwner();
    const email = `Dev.${uniq()}@Example.com`;
    const sent = await invite(o.c, email, 'developer');
    expect(sent.status).toBe(303);
    expect(sent.location).toBe('/members?done=invited');
    const lower = email.toLowerCase();
    const mail = await sink.waitFor((m) => m.to.includes(lower) && /\/invite\?token=/.test(m.text));
    expect(mail.subject).toBe('Convite para uma equipe no catraca');
    expect(mail.text).toContain(`${o.email} convidou você para uma equipe no catraca, como Desenvolvedor.`);
    expect(mail.text).toContain('O link vale por 7 dias e funciona uma vez.');
    const link = await invitationLink(lower);
    const token = new URL(link, portal.url).searchParams.get('token')!;
    const row = await one('select token_hash, email, role, tenant_id, invited_by, expires_at - created_at as ttl from portal_invitations where email = $1', [
      lower,
    ]);
    expect(row).toMatchObject({ email: lower, role: 'developer', tenant_id: o.tenantId, invited_by: o.id, ttl: { days: 7 } });
    expect(row.token_hash).toEqual(createHash('sha256').update(token).digest());
    // pending, on the members page
    const members = await o.c.get(sent.location!);
    expect(members.text).toContain('Convite enviado.');
    expect(members.text).toMatch(new RegExp(`data-testid="invitation-row">\\s*<td>${lower}</td><td>Desenvolvedor</td><td>${o.email}</td>`));

    const c = client();
    const page = await c.get(link);
    expect(page.status).toBe(200);
    expect(page.text).toContain(
      `${o.email} convidou ${lower} para entrar em ${o.email} no catraca como Desenvolvedor (as próprias chaves, uso, resultados de lotes).`,
    );
    const accepted = await c.post('/invite', { _csrf: PortalClient.csrf(page.text), token, password: PASSWORD });
    expect(accepted.status).toBe(303);
    expect(accepted.location).toBe('/dashboard');
    const user = await one('select id, tenant_id, role, email_verified_at from portal_users where email = $1', [lower]);
    expect(user).toMatchObject({ tenant_id: o.tenantId, role: 'developer' });
    expect(user.email_verified_at).toBeInstanceOf(Date);
    expect((await c.get('/dashboard')).status).toBe(200);
    expect(await count('select count(*)::int as n from portal_invitations where email = $1 and accepted_at is not null', [lower])).toBe(1);
    // the member signs in with that password
    const again = client();
    expect((await again.signIn(lower)).status).toBe(303);

    // single use: the link is spent, for a GET and for a POST
    const used = client();
    const spent = await used.get(link);
    expect(spent.status).toBe(400);
    expect(spent.text).toContain('Este convite é inválido, expirou, foi cancelado ou já foi usado.');
    expect((await used.post('/invite', { _csrf: await used.csrfOf('/login'), token, password: PASSWORD })).status).toBe(400);
    // listed as a member, no longer pending
    const after = await o.c.get('/members');
    expect(after.text).not.toContain('data-testid="invitation-row"');
    expect([...after.text.matchAll(/data-testid="member-row"/g)].length).toBe(2);
    // the token is never logged
    expect(logged.some((l) => l.includes(token))).toBe(false);
  });

  it('an English inviter sends the English mail with a link that opens in English', async () => {
    const o = await newOwner();
    const email = `en.${uniq()}@example.com`;
    const res = await o.c.post('/members/invite?lang=en', { _csrf: await o.c.csrfOf('/members'), email, role: 'billing' });
    expect(res.status).toBe(303);
    const mail = await sink.waitFor((m) => m.to.includes(email));
    expect(mail.subject).toBe('An invitation to a team at catraca');
    expect(mail.text).toContain(`${o.email} invited you to a team at catraca, as Billing.`);
    const link = await invitationLink(email);
    expect(link).toMatch(/&lang=en$/);
    expect((await client().get(link)).text).toContain(`to join ${o.email} on catraca as Billing (top-ups, statement, exports, notifications).`);
  });

  it('an expired link is refused and creates nothing', async () => {
    const o = await newOwner();
    const email = `late.${uniq()}@example.com`;
    await invite(o.c, email, 'billing');
    const link = await invitationLink(email);
    await db.query(`update portal_invitations set expires_at = now() - interval '1 second' where email = $1`, [email]);
    const c = client();
    expect((await c.get(link)).status).toBe(400);
    const res = await c.post('/invite', { _csrf: await c.csrfOf('/login'), token: new URL(link, portal.url).searchParams.get('token')!, password: PASSWORD });
    expect(res.status).toBe(400);
    expect(await count('select count(*)::int as n from portal_users where email = $1', [email])).toBe(0);
    expect((await o.c.get('/members')).text).toContain('<span class="badge s-EXPIRADA">expirado</span>');
  });

  it('a revoked invitation, or one replaced by inviting again, no longer works', async () => {
    const o = await newOwner();
    const email = `revoked.${uniq()}@example.com`;
    await invite(o.c, email, 'developer');
    const first = await invitationLink(email);
    const id = (await one('select id from portal_invitations where email = $1', [email])).id;
    const revoked = await o.c.post(`/members/invitations/${id}/revoke`, { _csrf: await o.c.csrfOf('/members') });
    expect(revoked.status).toBe(303);
    expect(revoked.location).toBe('/members?done=revoked');
    expect((await client().get(first)).status).toBe(400);
    // revoking it again, or another tenant's: 404
    expect((await o.c.post(`/members/invitations/${id}/revoke`, { _csrf: await o.c.csrfOf('/members') })).status).toBe(404);
    const other = await newOwner();
    await invite(other.c, `x.${uniq()}@example.com`, 'billing');
    const otherId = (await one('select id from portal_invitations where tenant_id = $1', [other.tenantId])).id;
    expect((await o.c.post(`/members/invitations/${otherId}/revoke`, { _csrf: await o.c.csrfOf('/members') })).status).toBe(404);

    // invited twice: the second link replaces the first
    await invite(o.c, email, 'developer');
    const second = await invitationLink(email, 2);
    expect(second).not.toBe(first);
    await invite(o.c, email, 'billing');
    const third = await invitationLink(email, 3);
    expect((await client().get(second)).status).toBe(400);
    const { res } = await accept(third);
    expect(res.status).toBe(303);
    expect(await one('select role from portal_users where email = $1', [email])).toEqual({ role: 'billing' });
  });

  it('bound to the invited address: refused to a browser signed in as someone else, and to an address that has a login elsewhere', async () => {
    const o = await newOwner();
    const email = `bound.${uniq()}@example.com`;
    await invite(o.c, email, 'admin');
    const link = await invitationLink(email);
    const token = new URL(link, portal.url).searchParams.get('token')!;
    // someone else's browser, signed in
    const stranger = await newOwner();
    const page = await stranger.c.get(link);
    expect(page.status).toBe(403);
    expect(page.text).toContain(`Este convite é para ${email}, mas você entrou como ${stranger.email}. Saia e abra o link de novo.`);
    const forced = await stranger.c.post('/invite', { _csrf: PortalClient.csrf(page.text), token, password: PASSWORD });
    expect(forced.status).toBe(403);
    expect(await count('select count(*)::int as n from portal_users where email = $1', [email])).toBe(0);
    expect(await roleOf(stranger.id)).toBe('owner');

    // an address with a login in another tenant: the inviter is not told (no enumeration), the invitee is
    const taken = await newOwner();
    const sent = await invite(o.c, taken.email, 'developer');
    expect(sent.status).toBe(303);
    const takenLink = await invitationLink(taken.email);
    const c = client();
    const refused = await c.get(takenLink);
    expect(refused.status).toBe(409);
    expect(refused.text).toContain(`O endereço ${taken.email} já tem um login no catraca. Um login pertence a uma única empresa`);
    const post = await c.post('/invite', {
      _csrf: await c.csrfOf('/login'),
      token: new URL(takenLink, portal.url).searchParams.get('token')!,
      password: PASSWORD,
    });
    expect(post.status).toBe(409);
    expect(await one('select tenant_id, role from portal_users where email = $1', [taken.email])).toEqual({ tenant_id: taken.tenantId, role: 'owner' });
    // a member of the same tenant cannot be invited again
    const dup = await invite(o.c, o.email, 'developer');
    expect(dup.status).toBe(409);
    expect(dup.text).toContain('Este endereço já é membro da equipe.');
  });

  it('bad input, an unverified inviter, and more than 20 invitations an hour are refused with a message', async () => {
    const o = await newOwner();
    const csrf = await o.c.csrfOf('/members');
    const bad = await o.c.post('/members/invite', { _csrf: csrf, email: 'not-an-address', role: 'developer' });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('Informe um e-mail válido.');
    const role = await o.c.post('/members/invite', { _csrf: csrf, email: `r.${uniq()}@example.com`, role: 'superuser' });
    expect(role.status).toBe(400);
    expect(role.text).toContain('Escolha um papel da lista.');
    for (let i = 0; i < 20; i++) expect((await invite(o.c, `n${i}.${uniq()}@example.com`, 'developer')).status).toBe(303);
    const limited = await invite(o.c, `n21.${uniq()}@example.com`, 'developer');
    expect(limited.status).toBe(429);
    expect(limited.text).toContain('Muitos convites na última hora.');

    const unverified = await newOwner();
    await db.query('update portal_users set email_verified_at = null where id = $1', [unverified.id]);
    const r = await invite(unverified.c, `u.${uniq()}@example.com`, 'developer');
    expect(r.status).toBe(403);
    expect(r.text).toContain('Confirme seu e-mail antes de convidar alguém');
    expect(await count('select count(*)::int as n from portal_invitations where tenant_id = $1', [unverified.tenantId])).toBe(0);
  });
});

describe('roles, checked on the server', () => {
  it('an admin manages members who are not owners; never owners, never to owner', async () => {
    const o = await newOwner();
    const admin = await member(o.c, 'admin');
    const dev = await member(o.c, 'developer');
    const page = await admin.c.get('/members');
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('<option value="owner"');
    const csrf = PortalClient.csrf(page.text);
    const ownerInvite = await admin.c.post('/members/invite', { _csrf: csrf, email: `o.${uniq()}@example.com`, role: 'owner' });
    expect(ownerInvite.status).toBe(403);
    expect(ownerInvite.text).toContain('Só um proprietário pode convidar, promover, rebaixar ou remover proprietários.');
    expect((await admin.c.post(`/members/${o.id}/role`, { _csrf: csrf, role: 'developer' })).status).toBe(403);
    expect((await admin.c.post(`/members/${dev.id}/role`, { _csrf: csrf, role: 'owner' })).status).toBe(403);
    expect((await admin.c.get(`/members/${o.id}/remove`)).status).toBe(403);
    expect((await admin.c.post(`/members/${o.id}/remove`, { _csrf: csrf })).status).toBe(403);
    expect(await roleOf(o.id)).toBe('owner');
    expect(await roleOf(dev.id)).toBe('developer');
    // what an admin may do
    expect((await admin.c.post(`/members/${dev.id}/role`, { _csrf: csrf, role: 'billing' })).status).toBe(303);
    expect(await roleOf(dev.id)).toBe('billing');
    expect((await invite(admin.c, `b.${uniq()}@example.com`, 'billing')).status).toBe(303);
    // a member of another tenant is not found
    const other = await newOwner();
    expect((await admin.c.post(`/members/${other.id}/role`, { _csrf: csrf, role: 'developer' })).status).toBe(404);
    expect((await admin.c.post(`/members/${other.id}/remove`, { _csrf: csrf })).status).toBe(404);
    expect(await roleOf(other.id)).toBe('owner');
  });

  it('a developer: usage and their own keys; no statement, top-up or members; the owner’s key is a 404', async () => {
    const o = await newOwner();
    const csrf = await o.c.csrfOf('/keys');
    expect((await o.c.post('/keys', { _csrf: csrf, label: 'owner-key', scope: 'all' })).status).toBe(303);
    const ownerKey = await one(`select id, created_by from api_keys where tenant_id = $1 and label = 'owner-key'`, [o.tenantId]);
    expect(ownerKey.created_by).toBe(o.id);
    const topup = await o.c.post('/topup', { _csrf: csrf, amount: '10,00' });
    const txid = topup.location!.split('/').pop()!;

    const dev = await member(o.c, 'developer');
    const home = await dev.c.get('/dashboard');
    expect(home.status).toBe(200);
    expect(home.text).not.toContain('href="/topup"');
    expect(home.text).not.toContain('href="/ledger"');
    expect(home.text).not.toContain('href="/members"');
    for (const path of ['/ledger', '/topup', `/topup/${txid}`, '/members', `/members/${o.id}/remove`]) {
      const res = await dev.c.get(path);
      expect({ path, status: res.status }).toEqual({ path, status: 403 });
      expect(res.text).toContain('Seu papel (Desenvolvedor) não permite esta página ou ação.');
    }
    expect(await dev.c.get(`/topup/${txid}/status`)).toMatchObject({ status: 403, text: '{"error":"forbidden"}' });
    const dcsrf = await dev.c.csrfOf('/keys');
    expect((await dev.c.post('/topup', { _csrf: dcsrf, amount: '10,00' })).status).toBe(403);
    expect((await dev.c.post('/members/invite', { _csrf: dcsrf, email: `x.${uniq()}@example.com`, role: 'admin' })).status).toBe(403);
    expect((await dev.c.post(`/members/${o.id}/role`, { _csrf: dcsrf, role: 'developer' })).status).toBe(403);
    expect(await count('select count(*)::int as n from pix_charges where tenant_id = $1', [o.tenantId])).toBe(1);

    // keys: their own only; another's key does not exist for them
    expect((await dev.c.post('/keys', { _csrf: dcsrf, label: 'dev-key', scope: 'all' })).status).toBe(303);
    const devKey = await one(`select id, created_by from api_keys where tenant_id = $1 and label = 'dev-key'`, [o.tenantId]);
    expect(devKey.created_by).toBe(dev.id);
    const keys = await dev.c.get('/keys');
    expect(keys.text).toContain('dev-key');
    expect(keys.text).not.toContain('owner-key');
    expect(keys.text).not.toContain('data-testid="key-creator"');
    expect((await dev.c.get(`/keys/${ownerKey.id}/revoke`)).status).toBe(404);
    expect((await dev.c.post(`/keys/${ownerKey.id}/revoke`, { _csrf: dcsrf })).status).toBe(404);
    expect((await one('select revoked_at from api_keys where id = $1', [ownerKey.id])).revoked_at).toBe(null);
    expect((await dev.c.post(`/keys/${devKey.id}/revoke`, { _csrf: dcsrf })).status).toBe(200);
    expect((await one('select revoked_at from api_keys where id = $1', [devKey.id])).revoked_at).toBeInstanceOf(Date);

    // the owner sees every key and who created it
    const ownerKeys = await o.c.get('/keys');
    expect(ownerKeys.text).toMatch(new RegExp(`<td>dev-key</td>[\\s\\S]*?<td data-testid="key-creator">${dev.email}</td>`));
    expect(ownerKeys.text).toMatch(new RegExp(`<td>owner-key</td>[\\s\\S]*?<td data-testid="key-creator">${o.email}</td>`));
  });

  it('billing: top-ups and the statement; no keys, no members', async () => {
    const o = await newOwner();
    const billing = await member(o.c, 'billing');
    expect((await billing.c.get('/ledger')).status).toBe(200);
    expect((await billing.c.get('/topup')).status).toBe(200);
    const csrf = await billing.c.csrfOf('/topup');
    const charge = await billing.c.post('/topup', { _csrf: csrf, amount: '10,00' });
    expect(charge.status).toBe(303);
    expect((await billing.c.get(charge.location!)).status).toBe(200);
    expect((await billing.c.get('/keys')).status).toBe(403);
    expect((await billing.c.post('/keys', { _csrf: csrf, label: 'nope', scope: 'all' })).status).toBe(403);
    expect((await billing.c.get('/members')).status).toBe(403);
    expect(await count(`select count(*)::int as n from api_keys where tenant_id = $1`, [o.tenantId])).toBe(0);
  });
});

describe('the last owner', () => {
  it('cannot be demoted, removed or leave; the database refuses it too', async () => {
    const o = await newOwner();
    const csrf = await o.c.csrfOf('/members');
    const demote = await o.c.post(`/members/${o.id}/role`, { _csrf: csrf, role: 'admin' });
    expect(demote.status).toBe(409);
    expect(demote.text).toContain('A conta precisa de pelo menos um proprietário: torne outro membro proprietário antes.');
    expect((await o.c.post(`/members/${o.id}/remove`, { _csrf: csrf })).status).toBe(409);
    const leave = await o.c.post('/account/leave', { _csrf: csrf });
    expect(leave.status).toBe(409);
    expect(leave.text).toContain('A conta precisa de pelo menos um proprietário');
    expect(await roleOf(o.id)).toBe('owner');
    expect((await o.c.get('/dashboard')).status).toBe(200);

    // the constraint trigger of migration 036, as the portal's role: a statement that skips the locks is refused at commit
    // (a tenant's last member may go: it keeps no members, so no owner either)
    await memberInDb(o.tenantId, 'developer');
    const portalDb = createPool(derivedRoleUrl(process.env.DATABASE_URL!, 'portal'), 1);
    try {
      await expect(portalDb.query(`update portal_users set role = 'admin' where id = $1`, [o.id])).rejects.toMatchObject({
        code: '23000',
        message: `tenant ${o.tenantId} would have no owner: a tenant keeps at least one`,
      });
      await expect(portalDb.query('delete from portal_users where id = $1', [o.id])).rejects.toMatchObject({ code: '23000' });
    } finally {
      await portalDb.end();
    }
    expect(await roleOf(o.id)).toBe('owner');
  });

  it('with another owner, an owner may step down or leave', async () => {
    const o = await newOwner();
    const second = await member(o.c, 'owner');
    const csrf = await second.c.csrfOf('/members');
    const down = await second.c.post(`/members/${second.id}/role`, { _csrf: csrf, role: 'admin' });
    expect(down.status).toBe(303);
    expect(down.location).toBe('/login?role=1');
    expect(await roleOf(second.id)).toBe('admin');
    expect((await second.c.get('/members')).status).toBe(303);
    expect((await o.c.post(`/members/${second.id}/role`, { _csrf: await o.c.csrfOf('/members'), role: 'owner' })).status).toBe(303);
    const again = client();
    expect((await again.signIn(second.email)).status).toBe(303);
    const left = await again.post('/account/leave', { _csrf: await again.csrfOf('/account') });
    expect(left.status).toBe(303);
    expect(left.location).toBe('/login?left=1');
    expect(await roleOf(second.id)).toBe(null);
    expect(await owners(o.tenantId)).toBe(1);
  });

  it('two owners stepping down, leaving, or demoting each other at the same moment: one of them stays owner', async () => {
    for (let round = 0; round < 9; round++) {
      const tenantId = (await createTenant(db, `race-${uniq()}`)).id;
      const a = await memberInDb(tenantId, 'owner');
      const b = await memberInDb(tenantId, 'owner');
      const [ca, cb] = [await a.c.csrfOf('/account'), await b.c.csrfOf('/account')];
      const kind = round % 3;
      const [ra, rb] = await Promise.all(
        kind === 0
          ? [a.c.post(`/members/${a.id}/role`, { _csrf: ca, role: 'developer' }), b.c.post(`/members/${b.id}/role`, { _csrf: cb, role: 'developer' })]
          : kind === 1
            ? [a.c.post('/account/leave', { _csrf: ca }), b.c.post('/account/leave', { _csrf: cb })]
            : [a.c.post(`/members/${b.id}/role`, { _csrf: ca, role: 'billing' }), b.c.post(`/members/${a.id}/role`, { _csrf: cb, role: 'billing' })],
      );
      const outcome = `round ${round}: ${ra.status} ${ra.location} / ${rb.status} ${rb.location}`;
      expect(await owners(tenantId), outcome).toBe(1);
      // exactly one change went through; the other was refused: the last owner (409), or — demoted
      // meanwhile — no longer allowed (403) or already signed out (303 to /login)
      const done = [ra, rb].filter((r) => r.status === 303 && /^\/(members\?done=role|login\?(left|role)=1)$/.test(r.location ?? ''));
      const refused = [ra, rb].filter((r) => r.status === 409 || r.status === 403 || (r.status === 303 && r.location === '/login'));
      expect([done.length, refused.length], outcome).toEqual([1, 1]);
    }
  });

  it('members.ts directly: of two concurrent demotions of the only two owners, exactly one is applied', async () => {
    for (let round = 0; round < 10; round++) {
      const tenantId = (await createTenant(db, `race-db-${uniq()}`)).id;
      const a = await memberInDb(tenantId, 'owner');
      const b = await memberInDb(tenantId, 'owner');
      const results = await Promise.all([
        changeRole(db, { tenantId, actorId: a.id, targetId: a.id, role: 'admin' }),
        changeRole(db, { tenantId, actorId: b.id, targetId: b.id, role: 'admin' }),
      ]);
      expect(results.sort()).toEqual(['last_owner', 'ok']);
      const removed = await Promise.all([
        removeMember(db, { tenantId, actorId: a.id, targetId: a.id, revokeKeys: false }),
        removeMember(db, { tenantId, actorId: b.id, targetId: b.id, revokeKeys: false }),
      ]);
      // whoever is still owner cannot leave; the other (now admin) may
      expect(removed.map((r) => r.result).sort()).toEqual(['last_owner', 'ok']);
      expect(await owners(tenantId)).toBe(1);
    }
  });
});

describe('removal ends access at once', () => {
  it('a removed member’s open session is signed out on its next request; their keys revoked when asked, their invitations revoked', async () => {
    const o = await newOwner();
    const dev = await member(o.c, 'developer');
    const admin = await member(o.c, 'admin');
    const dcsrf = await dev.c.csrfOf('/keys');
    expect((await dev.c.post('/keys', { _csrf: dcsrf, label: 'dev-a', scope: 'all' })).status).toBe(303);
    expect((await dev.c.post('/keys', { _csrf: dcsrf, label: 'dev-b', scope: 'all' })).status).toBe(303);
    // a second browser of the developer
    const laptop = client();
    expect((await laptop.signIn(dev.email)).status).toBe(303);
    expect(await count('select count(*)::int as n from portal_sessions where user_id = $1', [dev.id])).toBe(2);
    expect((await dev.c.get('/keys')).status).toBe(200);
    // the admin invited someone who has not accepted yet
    await invite(admin.c, `pending.${uniq()}@example.com`, 'developer');

    const confirm = await o.c.get(`/members/${dev.id}/remove`);
    expect(confirm.status).toBe(200);
    expect(confirm.text).toContain('Revogar também as chaves de API ativas que esta pessoa criou (2; recomendado: ela conhece essas chaves).');
    const removed = await o.c.post(`/members/${dev.id}/remove`, { _csrf: PortalClient.csrf(confirm.text), revoke_keys: '1' });
    expect(removed.status).toBe(303);
    expect(removed.location).toBe('/members?done=removed');
    for (const browser of [dev.c, laptop]) {
      const next = await browser.get('/keys');
      expect(next.status).toBe(303);
      expect(next.location).toBe('/login');
    }
    expect(await count('select count(*)::int as n from portal_sessions where user_id = $1', [dev.id])).toBe(0);
    expect(await count('select count(*)::int as n from portal_users where id = $1', [dev.id])).toBe(0);
    expect(await count(`select count(*)::int as n from api_keys where created_by = $1 and revoked_at is not null`, [dev.id])).toBe(2);
    // the former member cannot sign in
    expect((await client().signIn(dev.email)).status).toBe(401);

    // the admin, removed without revoking their keys; their pending invitation goes with them
    const acsrf = await admin.c.csrfOf('/keys');
    expect((await admin.c.post('/keys', { _csrf: acsrf, label: 'admin-key', scope: 'all' })).status).toBe(303);
    expect((await o.c.post(`/members/${admin.id}/remove`, { _csrf: await o.c.csrfOf('/members') })).status).toBe(303);
    expect((await admin.c.get('/dashboard')).status).toBe(303);
    expect(await count(`select count(*)::int as n from api_keys where created_by = $1 and revoked_at is null`, [admin.id])).toBe(1);
    expect(
      await count(`select count(*)::int as n from portal_invitations where invited_by is null and revoked_at is not null and tenant_id = $1`, [o.tenantId]),
    ).toBe(1);
    const keys = await o.c.get('/keys');
    expect(keys.text).toMatch(/<td>admin-key<\/td>[\s\S]*?<td data-testid="key-creator">ex-membro<\/td>/);
  });

  it('removing a member with a key, revoking it: exactly one key.revoked event for that key, made with the removal', async () => {
    const o = await newOwner();
    const dev = await memberInDb(o.tenantId, 'developer');
    const key = await createApiKey(db, { tenantId: o.tenantId, label: 'dev-only', createdBy: dev.id });
    const confirm = await o.c.get(`/members/${dev.id}/remove`);
    expect((await o.c.post(`/members/${dev.id}/remove`, { _csrf: PortalClient.csrf(confirm.text), revoke_keys: '1' })).status).toBe(303);
    const { rows } = await db.query(`select data, dedup_key from notify_events where tenant_id = $1 and type = 'key.revoked'`, [o.tenantId]);
    expect(rows).toEqual([
      {
        dedup_key: `key.revoked:${key.record.id}`,
        data: { tenant_id: o.tenantId, key_id: key.record.id, key_label: 'dev-only', key_hint: key.record.key_hint, revoked_at: expect.any(String) },
      },
    ]);
    // the event's revoked_at is the key's: both written by the one transaction
    const revokedAt = (await one('select revoked_at from api_keys where id = $1', [key.record.id])).revoked_at as Date;
    expect(new Date(rows[0].data.revoked_at).getTime()).toBe(revokedAt.getTime());
  });

  it('a member who leaves: the invitations they sent are revoked, as on removal', async () => {
    const o = await newOwner();
    const admin = await member(o.c, 'admin');
    const invited = `left-behind.${uniq()}@example.com`;
    expect((await invite(admin.c, invited, 'developer')).status).toBe(303);
    const link = await invitationLink(invited);
    const kept = `kept.${uniq()}@example.com`;
    expect((await invite(o.c, kept, 'developer')).status).toBe(303);
    const left = await admin.c.post('/account/leave', { _csrf: await admin.c.csrfOf('/account') });
    expect([left.status, left.location]).toEqual([303, '/login?left=1']);
    expect(await one('select revoked_at is not null as revoked from portal_invitations where email = $1', [invited])).toEqual({ revoked: true });
    expect((await client().get(link)).status).toBe(400);
    // the owner's invitation, sent before, still works
    expect((await client().get(await invitationLink(kept))).status).toBe(200);
  });

  it('a change of role ends the member’s sessions: they sign in again under the new role', async () => {
    const o = await newOwner();
    const dev = await member(o.c, 'developer');
    expect((await dev.c.get('/ledger')).status).toBe(403);
    expect((await o.c.post(`/members/${dev.id}/role`, { _csrf: await o.c.csrfOf('/members'), role: 'billing' })).status).toBe(303);
    expect((await dev.c.get('/dashboard')).status).toBe(303);
    const again = client();
    expect((await again.signIn(dev.email)).status).toBe(303);
    expect((await again.get('/ledger')).status).toBe(200);
    expect((await again.get('/account')).text).toContain('<strong data-testid="my-role">Financeiro</strong>');
  });

  it('keys made by the CLI have no creator: a developer never sees them', async () => {
    const o = await newOwner();
    await createApiKey(db, { tenantId: o.tenantId, label: 'cli-key' });
    const dev = await memberInDb(o.tenantId, 'developer');
    expect((await dev.c.get('/keys')).text).not.toContain('cli-key');
    expect((await o.c.get('/keys')).text).toMatch(/<td>cli-key<\/td>[\s\S]*?<td data-testid="key-creator">—<\/td>/);
  });
});
