import { subjects } from '../../bus/subjects.ts';
import { createTenant } from '../../db/tenants.ts';
import { brlString, parseFlags, str } from '../args.ts';
import { CliError, UsageError, type CliContext } from '../context.ts';
import { broadcast, plainTable, requireTenant, withDb } from './shared.ts';

export async function tenantCreate(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['name'], required: ['name'] }, 'tenant create');
  const name = str(flags, 'name')!.trim();
  if (!name || name.length > 200) throw new UsageError('tenant create: --name must be 1 to 200 characters');
  const tenant = await withDb(ctx, (db) => createTenant(db, name));
  ctx.out({ id: tenant.id, name: tenant.name }, `created tenant ${tenant.id} (${tenant.name})`);
}

export async function tenantList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'tenant list');
  const rows = await withDb(
    ctx,
    async (db) =>
      (
        await db.query(
          `select t.id, t.name, t.balance_micros, t.held_micros, t.created_at, t.suspended_at, t.suspended_reason,
                (select count(*) from api_keys k where k.tenant_id = t.id and k.revoked_at is null)::int as active_keys
           from tenants t order by t.created_at, t.id`,
        )
      ).rows,
  );
  const tenants = rows.map((t) => ({
    id: t.id as string,
    name: t.name as string,
    balance: brlString(t.balance_micros),
    held: brlString(t.held_micros),
    active_keys: t.active_keys as number,
    created_at: (t.created_at as Date).toISOString(),
    ...(t.suspended_at ? { suspended_at: (t.suspended_at as Date).toISOString(), suspended_reason: t.suspended_reason as string } : {}),
  }));
  ctx.out(
    { tenants },
    plainTable(
      ['ID', 'NAME', 'BALANCE', 'HELD', 'KEYS', 'CREATED', 'STATUS'],
      tenants.map((t) => [t.id, t.name, t.balance, t.held, String(t.active_keys), t.created_at.slice(0, 19) + 'Z', t.suspended_at ? 'suspended' : 'active']),
      [2, 3, 4],
      '(no tenants)',
    ),
  );
}

/** Suspends a tenant's admission on every front door within a second (its balance and keys are kept). */
export async function tenantSuspend(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'tenant suspend';
  const flags = parseFlags(args, { values: ['id', 'reason'], required: ['id', 'reason'] }, cmd);
  const id = str(flags, 'id')!;
  const reason = str(flags, 'reason')!.trim();
  if (!reason || reason.length > 500) throw new UsageError(`${cmd}: --reason must be 1 to 500 characters`);
  const suspended = await withDb(ctx, async (db) => {
    await requireTenant(db, id);
    const { rowCount } = await db.query('update tenants set suspended_at = now(), suspended_reason = $2 where id = $1 and suspended_at is null', [id, reason]);
    return (rowCount ?? 0) > 0;
  });
  ctx.out({ id, suspended: true }, suspended ? `suspended tenant ${id}` : `tenant ${id} was already suspended`);
  await broadcast(
    ctx,
    subjects.tenantChanged,
    { tenant_id: id },
    'suspended in the database',
    'front doors stop admitting it from their leases within the lease window',
  );
}

/** Lifts a tenant's suspension (after a shortfall, once an operator has looked; or an operator's own). */
export async function tenantReactivate(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id'], required: ['id'] }, 'tenant reactivate');
  const id = str(flags, 'id')!;
  const was = await withDb(ctx, async (db) => {
    await requireTenant(db, id);
    const { rows } = await db.query(
      'update tenants t set suspended_at = null, suspended_reason = null from tenants old where t.id = $1 and old.id = t.id returning old.suspended_reason as reason',
      [id],
    );
    return rows[0]?.reason as string | null;
  });
  if (was === null) throw new CliError(`tenant reactivate: tenant ${id} is not suspended`);
  ctx.out({ id, reactivated: true, was: was }, `reactivated tenant ${id} (was: ${was})`);
  await broadcast(ctx, subjects.tenantChanged, { tenant_id: id }, 'reactivated in the database', 'front doors admit it again at once');
}

/** A tenant's portal members (issue 20): e-mail, role, since when; never a password hash. */
export async function tenantMembers(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id'], required: ['id'] }, 'tenant members');
  const id = str(flags, 'id')!;
  const rows = await withDb(ctx, async (db) => {
    await requireTenant(db, id);
    return (
      await db.query(
        `select id, email, role, created_at, email_verified_at from portal_users where tenant_id = $1
          order by array_position(array['owner', 'admin', 'billing', 'developer'], role), created_at, id`,
        [id],
      )
    ).rows;
  });
  const members = rows.map((m) => ({
    id: m.id as string,
    email: m.email as string,
    role: m.role as string,
    verified: m.email_verified_at !== null,
    created_at: (m.created_at as Date).toISOString(),
  }));
  ctx.out(
    { tenant: id, members },
    plainTable(
      ['ID', 'EMAIL', 'ROLE', 'VERIFIED', 'SINCE'],
      members.map((m) => [m.id, m.email, m.role, m.verified ? 'yes' : 'no', m.created_at.slice(0, 19) + 'Z']),
      [],
      '(no members)',
    ),
  );
}
