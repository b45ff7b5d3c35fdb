import { Hono } from 'hono';
import { getCookie } from 'hono/cookie';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { getTenant } from '../../db/tenants.ts';
import { createLogger } from '../../log.ts';
import { createSession, destroySessionToken, MIN_PASSWORD, SESSION_TTL_MS } from '../auth.ts';
import { type MailContext, sendInvitation } from '../emails.ts';
import { type AppEnv, clearPortalCookie, type Ctx, SESSION_COOKIE, setPortalCookie, tenantOf } from '../http.ts';
import { one, redirect } from '../../web/http.ts';
import { acceptInvitation, changeRole, invite, listInvitations, type MemberChange, openInvitation, removeMember, revokeInvitation } from '../members.ts';
import type { Renderer } from '../render.ts';
import { afterRevocation } from '../revocation.ts';
import { isRole, listMembers } from '../../db/members.ts';
import { can, forbidden } from '../authorize.ts';
import { messagePage } from '../views/layout.ts';
import { accountPage, grantableRoles, invitationPage, membersPage, removeMemberPage } from '../views/members.ts';

// Team members (issue 20): the members page (invite, change a role, remove), one's account page
// (leave), and the invitation link. Every route declares its permission (src/portal/roles.ts);
// what depends on the member acted on (an owner, the last owner) is decided in members.ts, in
// the transaction that changes it.

const log = createLogger('portal');
const MEMBER_ID = '{[A-Za-z0-9_-]{1,64}}';
const DONE = ['invited', 'role', 'removed', 'revoked'] as const;

export interface MembersDeps extends MailContext {
  db: pg.Pool;
  nc: NatsConnection | null;
}

type PageExtra = { status?: number; error?: string; form?: { email?: string; role?: string } };

export function memberRoutes(d: MembersDeps, r: Renderer): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const ui = membersUi(d, r);
  app.get('/members', can('members'), (c) => ui.page(c));
  invitationAdminRoutes(app, d, ui);
  memberChangeRoutes(app, d, r, ui);
  return app;
}

interface MembersUi {
  /** The members page, with an error or the flash of what was done. */
  page(c: Ctx, o?: PageExtra): Promise<Response>;
  /** The answer to a refused change: the members page saying why (a 404 for one not found). */
  refused(c: Ctx, result: Exclude<MemberChange, 'ok'>): Promise<Response> | Response;
}

function membersUi(d: MembersDeps, r: Renderer): MembersUi {
  const { db } = d;
  const page = async (c: Ctx, o: PageExtra = {}) => {
    const tenantId = tenantOf(c);
    const [members, invitations] = await Promise.all([listMembers(db, tenantId), listInvitations(db, tenantId)]);
    const done = c.var.url.searchParams.get('done');
    const flash = !o.error && (DONE as readonly string[]).includes(done ?? '') ? c.var.t(`members.done_${done as (typeof DONE)[number]}`) : null;
    return r.page(c, o.status ?? 200, c.var.t('members.title'), (vc) => membersPage(vc, { members, invitations, form: o.form }), {
      error: o.error,
      flash,
    });
  };
  const refused = (c: Ctx, result: Exclude<MemberChange, 'ok'>) => {
    if (result === 'not_found') return r.notFound(c);
    const t = c.var.t;
    return page(c, { status: result === 'forbidden' ? 403 : 409, error: result === 'forbidden' ? t('members.owners_only') : t('members.last_owner') });
  };
  return { page, refused };
}

/** Inviting by e-mail, and revoking an open invitation. */
function invitationAdminRoutes(app: Hono<AppEnv>, d: MembersDeps, ui: MembersUi): void {
  const { db } = d;
  app.post('/members/invite', can('members'), async (c) => {
    const { t, form, session } = c.var;
    const values = { email: one(form, 'email'), role: one(form, 'role') };
    if (!d.mailer.configured) return ui.page(c, { status: 503, error: t('members.mail_off'), form: values });
    if (!session!.user.email_verified_at) return ui.page(c, { status: 403, error: t('members.verify_first'), form: values });
    const res = await invite(db, { tenantId: tenantOf(c), invitedBy: session!.user, email: values.email, role: values.role });
    if (!res.ok) {
      const status = { bad_email: 400, bad_role: 400, member: 409, forbidden: 403, rate_limited: 429 }[res.error];
      const error = {
        bad_email: 'auth.bad_email',
        bad_role: 'members.bad_role',
        member: 'members.is_member',
        forbidden: 'members.owners_only',
        rate_limited: 'members.rate_limited',
      } as const;
      return ui.page(c, { status, error: t(error[res.error]), form: values });
    }
    log.info('member invited', { tenant: tenantOf(c), by: session!.user.id, invitation: res.id, role: res.role });
    sendInvitation(d, t, c.var.lang, { to: res.email, token: res.token, inviter: session!.user.email, role: res.role, invitationId: res.id });
    return redirect(c, '/members?done=invited');
  });
  app.post(`/members/invitations/:id${MEMBER_ID}/revoke`, can('members'), async (c) => {
    const res = await revokeInvitation(db, { tenantId: tenantOf(c), actor: c.var.session!.user, id: c.req.param('id') });
    if (res !== 'revoked') return ui.refused(c, res);
    log.info('invitation revoked', { tenant: tenantOf(c), by: c.var.session!.user.id, invitation: c.req.param('id') });
    return redirect(c, '/members?done=revoked');
  });
}

/** Changing a member's role, and removing a member (the confirmation page, then the removal). */
function memberChangeRoutes(app: Hono<AppEnv>, d: MembersDeps, r: Renderer, ui: MembersUi): void {
  const { db } = d;
  app.post(`/members/:id${MEMBER_ID}/role`, can('members'), async (c) => {
    const role = one(c.var.form, 'role');
    if (!isRole(role)) return ui.page(c, { status: 400, error: c.var.t('members.bad_role') });
    const me = c.var.session!.user;
    const targetId = c.req.param('id');
    const res = await changeRole(db, { tenantId: tenantOf(c), actorId: me.id, targetId, role });
    if (res !== 'ok') return ui.refused(c, res);
    log.info('member role changed', { tenant: tenantOf(c), by: me.id, member: targetId, role });
    // a change of one's own role ended one's own sessions too
    if (targetId === me.id && role !== me.role) return signedOut(c, '/login?role=1');
    return redirect(c, '/members?done=role');
  });
  app.get(`/members/:id${MEMBER_ID}/remove`, can('members'), async (c) => {
    const tenantId = tenantOf(c);
    const m = (await listMembers(db, tenantId)).find((x) => x.id === c.req.param('id'));
    if (!m) return r.notFound(c);
    if (!grantableRoles(c.var.session!.user.role).includes(m.role)) return forbidden(c, r);
    const { rows } = await db.query('select count(*)::int as n from api_keys where tenant_id = $1 and created_by = $2 and revoked_at is null', [
      tenantId,
      m.id,
    ]);
    return r.page(c, 200, c.var.t('members.remove_title', { email: m.email }), (vc) => removeMemberPage(vc, m, rows[0].n));
  });
  app.post(`/members/:id${MEMBER_ID}/remove`, can('members'), async (c) => {
    const me = c.var.session!.user;
    const targetId = c.req.param('id');
    const revokeKeys = one(c.var.form, 'revoke_keys') === '1';
    const { result, revokedKeys, events } = await removeMember(db, { tenantId: tenantOf(c), actorId: me.id, targetId, revokeKeys });
    if (result !== 'ok') return ui.refused(c, result);
    log.info('member removed', { tenant: tenantOf(c), by: me.id, member: targetId, revoked_keys: revokedKeys.length });
    await afterRevocation(d, revokedKeys, events, log);
    if (targetId === me.id) return signedOut(c, '/login?left=1');
    return redirect(c, '/members?done=removed');
  });
}

/** One's own account: who, which company, which role; leaving it. */
export function accountRoutes(d: MembersDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  const page = async (c: Ctx, status = 200, error?: string) => {
    const user = c.var.session!.user;
    const company = (await getTenant(db, user.tenant_id))?.name ?? '';
    return r.page(c, status, c.var.t('account.title'), (vc) => accountPage(vc, { company, role: user.role }), { error });
  };
  app.get('/account', can('account'), (c) => page(c));
  app.post('/account/leave', can('account'), async (c) => {
    const me = c.var.session!.user;
    const { result } = await removeMember(db, { tenantId: me.tenant_id, actorId: me.id, targetId: me.id, revokeKeys: false });
    if (result === 'last_owner') return page(c, 409, c.var.t('members.last_owner'));
    if (result !== 'ok') return signedOut(c, '/login');
    log.info('member left', { tenant: me.tenant_id, member: me.id });
    return signedOut(c, '/login?left=1');
  });
  return app;
}

/** The invitation link: its page, and accepting it (no session: the invitee has no login yet). */
export function invitationRoutes(d: MembersDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();
  const refusal = (c: Ctx, status: number, text: string) =>
    r.page(c, status, c.var.t('invite.refused_title'), (vc) =>
      messagePage(vc, c.var.t('invite.refused_title'), text, { href: '/login', label: c.var.t('auth.login_button') }),
    );
  const linkInvalid = (c: Ctx) =>
    r.page(c, 400, c.var.t('auth.link_invalid_title'), (vc) => messagePage(vc, c.var.t('auth.link_invalid_title'), c.var.t('invite.link_invalid')));
  /** The invitation, or the answer that refuses it: invalid, signed in as someone, an address that has a login. */
  async function usable(c: Ctx, token: string) {
    const inv = await openInvitation(db, token);
    const { t, session } = c.var;
    if (!inv) return { refused: await linkInvalid(c) };
    if (session) return { refused: await refusal(c, 403, t('invite.signed_in', { email: inv.email, current: session.user.email })) };
    if (inv.taken) return { refused: await refusal(c, 409, t('invite.taken', { email: inv.email })) };
    return { inv };
  }
  app.get('/invite', can('public'), async (c) => {
    const token = c.var.url.searchParams.get('token') ?? '';
    const u = await usable(c, token);
    if (!u.inv) return u.refused;
    return r.page(c, 200, c.var.t('invite.title', { company: u.inv.tenant_name }), (vc) => invitationPage(vc, u.inv, token));
  });
  app.post('/invite', can('public'), async (c) => {
    const { t, form } = c.var;
    const token = one(form, 'token');
    const u = await usable(c, token);
    if (!u.inv) return u.refused;
    const password = one(form, 'password');
    if (password.length < MIN_PASSWORD || password.length > 1024)
      return r.page(c, 400, t('invite.title', { company: u.inv.tenant_name }), (vc) => invitationPage(vc, u.inv, token), { error: t('auth.weak_password') });
    const res = await acceptInvitation(db, token, password);
    if (!res.ok) return res.error === 'taken' ? refusal(c, 409, t('invite.taken', { email: u.inv.email })) : linkInvalid(c);
    log.info('invitation accepted', { tenant: res.user.tenant_id, user: res.user.id, role: res.user.role, invitation: u.inv.id });
    await destroySessionToken(db, getCookie(c, SESSION_COOKIE));
    const s = await createSession(db, res.user.id);
    setPortalCookie(c, SESSION_COOKIE, s.token, Math.floor(SESSION_TTL_MS / 1000));
    return redirect(c, '/dashboard');
  });
  return app;
}

function signedOut(c: Ctx, to: string): Response {
  clearPortalCookie(c, SESSION_COOKIE);
  return redirect(c, to);
}
