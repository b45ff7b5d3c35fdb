import { createId } from '@paralleldrive/cuid2';
import type pg from 'pg';
import { type DbClient, withTransaction } from '../db/pool.ts';
import { keysRevokedEvents, type NotifyEvent } from '../notify/events.ts';
import type { User } from './auth.ts';
import { hashPassword, normalizeEmail, validEmail } from '../web/sign-in.ts';
import { newLinkToken, TOKEN_RE, tokenHash } from './email-links.ts';
import { isRole, type Role } from '../db/members.ts';
import { may } from './roles.ts';

// A tenant's members (issue 20): invitations by e-mail link, roles, removal and leaving.
// A tenant always keeps an owner: every change that could take one away runs in a transaction
// that first locks the tenant's owners (and the members it touches), then decides on the roles
// as they are once it holds the locks — so two concurrent demotions or departures cannot both
// pass. The constraint trigger of migration 036 is the backstop in the database.

/** An invitation link works this long. */
export const INVITE_TTL_S = 7 * 24 * 3600;
/** Invitations a tenant may send per hour (each is an e-mail to an address of its choosing). */
export const INVITES_PER_TENANT_PER_HOUR = 20;
const LOCK_TENANT_INVITES = 7261106;

export interface Invitation {
  id: string;
  email: string;
  role: Role;
  invited_by_email: string | null;
  created_at: Date;
  expires_at: Date;
}
/** What the invitation page shows about a usable link. */
export interface OpenInvitation {
  id: string;
  tenant_id: string;
  tenant_name: string;
  email: string;
  role: Role;
  invited_by_email: string | null;
  /** the address already has a login (in this tenant or another): accepting is refused */
  taken: boolean;
}

/** The tenant's open invitations (not accepted, not revoked), the expired ones included until they are cleaned up. */
export async function listInvitations(db: DbClient, tenantId: string): Promise<Invitation[]> {
  const { rows } = await db.query(
    `select i.id, i.email, i.role, u.email as invited_by_email, i.created_at, i.expires_at
       from portal_invitations i left join portal_users u on u.id = i.invited_by
      where i.tenant_id = $1 and i.accepted_at is null and i.revoked_at is null order by i.created_at desc, i.id`,
    [tenantId],
  );
  return rows;
}

export type InviteResult =
  | { ok: true; token: string; id: string; email: string; role: Role }
  | { ok: false; error: 'bad_email' | 'bad_role' | 'forbidden' | 'member' | 'rate_limited' };

/**
 * Invites an address with a role; returns the link's token (only its hash is stored). Inviting an
 * address again replaces its open invitation. Whether the address has a login in another tenant
 * is not told here (sign-up does not tell either): the invitee learns it on accepting.
 */
export async function invite(db: pg.Pool, a: { tenantId: string; invitedBy: User; email: string; role: string }): Promise<InviteResult> {
  const email = normalizeEmail(a.email);
  if (!validEmail(email)) return { ok: false, error: 'bad_email' };
  if (!isRole(a.role)) return { ok: false, error: 'bad_role' };
  const role = a.role;
  if (role === 'owner' && !may(a.invitedBy.role, 'members.owners')) return { ok: false, error: 'forbidden' };
  return withTransaction(db, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_TENANT_INVITES, a.tenantId]);
    const member = await c.query('select 1 from portal_users where tenant_id = $1 and email = $2', [a.tenantId, email]);
    if (member.rows.length) return { ok: false, error: 'member' } as const;
    const { rows } = await c.query(`select count(*)::int as n from portal_invitations where tenant_id = $1 and created_at > now() - interval '1 hour'`, [
      a.tenantId,
    ]);
    if (rows[0].n >= INVITES_PER_TENANT_PER_HOUR) return { ok: false, error: 'rate_limited' } as const;
    await c.query('update portal_invitations set revoked_at = now() where tenant_id = $1 and email = $2 and accepted_at is null and revoked_at is null', [
      a.tenantId,
      email,
    ]);
    const { token, hash } = newLinkToken();
    const id = `inv_${createId()}`;
    await c.query(
      `insert into portal_invitations (id, token_hash, tenant_id, email, role, invited_by, expires_at)
       values ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))`,
      [id, hash, a.tenantId, email, role, a.invitedBy.id, INVITE_TTL_S],
    );
    return { ok: true, token, id, email, role } as const;
  });
}

/** Revokes an open invitation of the tenant. An owner's invitation only by an owner. */
export async function revokeInvitation(db: DbClient, a: { tenantId: string; actor: User; id: string }): Promise<'revoked' | 'not_found' | 'forbidden'> {
  const { rows } = await db.query('select role from portal_invitations where id = $1 and tenant_id = $2 and accepted_at is null and revoked_at is null', [
    a.id,
    a.tenantId,
  ]);
  if (!rows[0]) return 'not_found';
  if (rows[0].role === 'owner' && !may(a.actor.role, 'members.owners')) return 'forbidden';
  const r = await db.query('update portal_invitations set revoked_at = now() where id = $1 and accepted_at is null and revoked_at is null', [a.id]);
  return (r.rowCount ?? 0) > 0 ? 'revoked' : 'not_found';
}

/** A usable invitation link (not used, revoked or expired), with what its page shows; null otherwise. */
export async function openInvitation(db: DbClient, token: string): Promise<OpenInvitation | null> {
  if (!TOKEN_RE.test(token)) return null;
  const { rows } = await db.query(
    `select i.id, i.tenant_id, t.name as tenant_name, i.email, i.role, u.email as invited_by_email,
            exists (select 1 from portal_users x where x.email = i.email) as taken
       from portal_invitations i join tenants t on t.id = i.tenant_id left join portal_users u on u.id = i.invited_by
      where i.token_hash = $1 and i.accepted_at is null and i.revoked_at is null and i.expires_at > now()`,
    [tokenHash(token)],
  );
  return rows[0] ?? null;
}

export type AcceptResult = { ok: true; user: User } | { ok: false; error: 'invalid' | 'taken' };

/**
 * Accepts an invitation: the invited address becomes a member of the tenant with the invitation's
 * role and this password; receiving the link verified the address. The link is used up in the same
 * transaction. An address that already has a login (one login belongs to one tenant) is refused,
 * and the link stays usable.
 */
export async function acceptInvitation(db: pg.Pool, token: string, password: string): Promise<AcceptResult> {
  if (!TOKEN_RE.test(token)) return { ok: false, error: 'invalid' };
  const passwordHash = await hashPassword(password);
  try {
    return await withTransaction(db, async (c) => {
      const { rows } = await c.query(
        `update portal_invitations set accepted_at = now()
          where token_hash = $1 and accepted_at is null and revoked_at is null and expires_at > now() returning tenant_id, email, role`,
        [tokenHash(token)],
      );
      if (!rows[0]) return { ok: false, error: 'invalid' } as const;
      const { rows: users } = await c.query(
        `insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())
         returning id, tenant_id, email, created_at, email_verified_at, role`,
        [`usr_${createId()}`, rows[0].tenant_id, rows[0].email, passwordHash, rows[0].role],
      );
      return { ok: true, user: users[0] as User } as const;
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return { ok: false, error: 'taken' };
    throw err;
  }
}

export type MemberChange = 'ok' | 'not_found' | 'forbidden' | 'last_owner';

/**
 * Locks the tenant's owners and the given members, in id order (two changes never wait on each
 * other crosswise), and answers their roles as they are now. A row another transaction changed
 * while we waited is read as it was committed: an owner demoted meanwhile no longer counts.
 */
async function lockMembers(c: DbClient, tenantId: string, ids: string[]): Promise<{ roleOf: Map<string, Role>; owners: number }> {
  const { rows } = await c.query(`select id, role from portal_users where tenant_id = $1 and (role = 'owner' or id = any($2)) order by id for update`, [
    tenantId,
    ids,
  ]);
  return { roleOf: new Map(rows.map((r) => [r.id as string, r.role as Role])), owners: rows.filter((r) => r.role === 'owner').length };
}

/** May `actor` (role as locked) act on a member whose role is `from`, leaving it `to`? */
function allowedChange(actorRole: Role | undefined, from: Role, to: Role | null): boolean {
  if (!actorRole || !may(actorRole, 'members')) return false;
  return (from !== 'owner' && to !== 'owner') || may(actorRole, 'members.owners');
}

/** Gives a member another role; their sessions end (they sign in again under the new role). */
export async function changeRole(db: pg.Pool, a: { tenantId: string; actorId: string; targetId: string; role: Role }): Promise<MemberChange> {
  return withTransaction(db, async (c) => {
    const { roleOf, owners } = await lockMembers(c, a.tenantId, [a.actorId, a.targetId]);
    const from = roleOf.get(a.targetId);
    if (!from) return 'not_found';
    if (!allowedChange(roleOf.get(a.actorId), from, a.role)) return 'forbidden';
    if (from === a.role) return 'ok';
    if (from === 'owner' && owners <= 1) return 'last_owner';
    await c.query('update portal_users set role = $2 where id = $1', [a.targetId, a.role]);
    await c.query('delete from portal_sessions where user_id = $1', [a.targetId]);
    return 'ok';
  });
}

/**
 * Removes a member (or, actor = target, leaves): the login is deleted, and with it every session
 * (the next request of an open one is signed out) and e-mail link. The open invitations the member
 * sent are revoked (removed or leaving), and with `revokeKeys` the keys they created — they hold
 * those keys — each with its key.revoked event, made in the same transaction (returned to publish).
 */
export async function removeMember(
  db: pg.Pool,
  a: { tenantId: string; actorId: string; targetId: string; revokeKeys: boolean },
): Promise<{ result: MemberChange; revokedKeys: string[]; events: NotifyEvent[] }> {
  return withTransaction(db, async (c) => {
    const { roleOf, owners } = await lockMembers(c, a.tenantId, [a.actorId, a.targetId]);
    const from = roleOf.get(a.targetId);
    if (!from) return { result: 'not_found', revokedKeys: [], events: [] };
    const leaving = a.actorId === a.targetId;
    if (!leaving && !allowedChange(roleOf.get(a.actorId), from, null)) return { result: 'forbidden', revokedKeys: [], events: [] };
    if (from === 'owner' && owners <= 1) return { result: 'last_owner', revokedKeys: [], events: [] };
    // removed or leaving: the invitations they sent stop working either way
    await c.query('update portal_invitations set revoked_at = now() where invited_by = $1 and accepted_at is null and revoked_at is null', [a.targetId]);
    const revoked = a.revokeKeys
      ? (
          await c.query('update api_keys set revoked_at = now() where tenant_id = $1 and created_by = $2 and revoked_at is null returning id', [
            a.tenantId,
            a.targetId,
          ])
        ).rows.map((r) => r.id as string)
      : [];
    // key.revoked of each, in this transaction (published by the caller after the commit, else by the relay)
    const events = await keysRevokedEvents(c, revoked);
    await c.query('delete from portal_users where id = $1', [a.targetId]);
    return { result: 'ok', revokedKeys: revoked, events };
  });
}
