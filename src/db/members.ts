import type { DbClient } from './pool.ts';

// A tenant's members: the logins of portal_users, each with one role (checked by the table since
// migration 035). What each role may do in the portal is src/portal/roles.ts; the operator's console
// lists the same rows.

export const ROLES = ['owner', 'admin', 'billing', 'developer'] as const;
export type Role = (typeof ROLES)[number];
export const isRole = (s: unknown): s is Role => (ROLES as readonly unknown[]).includes(s);

export interface Member {
  id: string;
  email: string;
  role: Role;
  created_at: Date;
  email_verified_at: Date | null;
}

/** A tenant's members, owners first (then admin, billing, developer), oldest first within a role. */
export async function listMembers(db: DbClient, tenantId: string): Promise<Member[]> {
  const { rows } = await db.query(
    `select id, email, role, created_at, email_verified_at from portal_users where tenant_id = $1
      order by array_position(array['owner', 'admin', 'billing', 'developer'], role), created_at, id`,
    [tenantId],
  );
  return rows;
}
