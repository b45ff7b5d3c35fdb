import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import type pg from 'pg';

// PostgreSQL roles: one per process, each with only what it needs (docs/operations.md, "Least
// privilege"). Roles belong to the cluster, privileges to each database:
//   catraca_owner     NOLOGIN; owns the database, its schema, tables and functions. The migrations
//                     run as it (a superuser connects and SET ROLEs to it, or it is given LOGIN).
//   catraca_gateway   admission functions, key and account reads, the catalog, stored responses
//   catraca_worker    the catalog, read only
//   catraca_metering  settlement functions, the hold sweeper, expired responses
//   catraca_portal    its own tables, tenant and key creation, Pix top-ups, usage reads
//   catraca_admin     the admin CLI (`catraca …`)
//   catraca_console   the operator's console (src/console/): reads across tenants, audited writes (sale
//                     prices only of a model; money, key revocation, disabling an operator and the
//                     audit log only through its SECURITY DEFINER functions)
// What each may do is granted by migrations/034_roles.sql (catraca_console: 039_console.sql, narrowed
// by 042_console_least_privilege.sql) and the
// functions/*.sql files (EXECUTE); the functions that write what their callers may not touch run as the owner (SECURITY DEFINER).
//
// bootstrapRoles() runs at the start of every migration run, under its advisory lock. Connected as
// a superuser (or a role with CREATEROLE) it creates the missing roles, sets the passwords it is
// given, makes catraca_owner own the database and every object of its public schema, and switches
// to catraca_owner; connected as catraca_owner (or a member) it only switches; anyone else is
// refused. Creating or altering a role races with another database of the same cluster being
// migrated at the same time: those statements are retried.

export const OWNER_ROLE = 'catraca_owner';
export const LOGIN_ROLES = ['gateway', 'worker', 'metering', 'portal', 'admin', 'console'] as const;
export type LoginRole = (typeof LOGIN_ROLES)[number];
export type RolePasswords = Partial<Record<LoginRole, string>>;

/** The PostgreSQL role of a process (or of the admin CLI). */
export const roleName = (role: LoginRole): string => `catraca_${role}`;
const ALL_ROLES = [OWNER_ROLE, ...LOGIN_ROLES.map(roleName)];

/** `url` with the role's name and password in place of its own. */
export function roleUrl(url: string, role: LoginRole, password: string): string {
  const u = new URL(url);
  u.username = roleName(role);
  u.password = encodeURIComponent(password);
  return u.toString();
}

/**
 * The roles' passwords `npm start` and the tests use with a PostgreSQL they connect to as a
 * superuser: derived from that URL's password (HMAC-SHA-256), so that every run against the same
 * server agrees on them without storing any. Without a password in the URL (trust authentication)
 * the derivation is public: production sets DB_*_PASSWORD instead.
 */
export function derivedRolePasswords(adminUrl: string): Record<LoginRole, string> {
  const u = new URL(adminUrl);
  const key = `catraca-dev-roles:${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`;
  return Object.fromEntries(LOGIN_ROLES.map((r) => [r, `d${createHmac('sha256', key).update(r).digest('hex').slice(0, 40)}`])) as Record<LoginRole, string>;
}

/** The passwords DB_<ROLE>_PASSWORD gives (src/config.ts), for the roles it names. */
export function configuredRolePasswords(config: Partial<Record<string, unknown>>): RolePasswords {
  const out: RolePasswords = {};
  for (const r of LOGIN_ROLES) {
    const v = config[`DB_${r.toUpperCase()}_PASSWORD`];
    if (typeof v === 'string' && v) out[r] = v;
  }
  return out;
}

/** The role's URL with its derived password (see derivedRolePasswords). */
export function derivedRoleUrl(adminUrl: string, role: LoginRole): string {
  return roleUrl(adminUrl, role, derivedRolePasswords(adminUrl)[role]);
}

const SCRAM_ITERATIONS = 4096;

function scramKeys(password: string, salt: Buffer, iterations: number): { stored: Buffer; server: Buffer } {
  const salted = pbkdf2Sync(password.normalize('NFKC'), salt, iterations, 32, 'sha256');
  const client = createHmac('sha256', salted).update('Client Key').digest();
  return { stored: createHash('sha256').update(client).digest(), server: createHmac('sha256', salted).update('Server Key').digest() };
}

/**
 * The SCRAM-SHA-256 verifier PostgreSQL stores for `password`: sent in ALTER ROLE … PASSWORD
 * instead of the password itself, so that no server log or statement view ever shows it.
 */
export function scramVerifier(password: string, salt = randomBytes(16), iterations = SCRAM_ITERATIONS): string {
  const { stored, server } = scramKeys(password, salt, iterations);
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${stored.toString('base64')}:${server.toString('base64')}`;
}

/** Whether a stored verifier (pg_authid.rolpassword) is the one of `password`. */
export function scramMatches(verifier: string | null, password: string): boolean {
  const m = /^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$/.exec(verifier ?? '');
  if (!m) return false;
  const { stored, server } = scramKeys(password, Buffer.from(m[2], 'base64'), Number(m[1]));
  const want = Buffer.concat([stored, server]);
  const have = Buffer.concat([Buffer.from(m[3], 'base64'), Buffer.from(m[4], 'base64')]);
  return want.length === have.length && timingSafeEqual(want, have);
}

/** What bootstrapRoles did. */
export interface RolesBootstrap {
  /** superuser/CREATEROLE: roles created and ownership settled; owner: only switched to it. */
  as: 'bootstrap' | 'owner';
  /** The roles whose password is now the one given (set, or found already set). */
  passwords: LoginRole[];
}

/** A message for a connection that may neither create the roles nor act as their owner. */
export class RolesBootstrapError extends Error {
  constructor(user: string) {
    super(
      `the migrations need the catraca roles: connected as ${user}, which is neither a superuser, nor allowed to create roles (CREATEROLE), nor ${OWNER_ROLE}. ` +
        `Run them once as a superuser (it creates the roles and makes ${OWNER_ROLE} own the schema), then as ${OWNER_ROLE} or a superuser; see docs/operations.md, "Least privilege"`,
    );
    this.name = 'RolesBootstrapError';
  }
}

/**
 * Runs a role statement; another database of the cluster being migrated at the same time may get
 * there first: a role it created meanwhile is fine (42710, or 23505 while its creation commits), a
 * row it updated meanwhile ("tuple concurrently updated") means trying again.
 */
async function retried(client: pg.Client, sql: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await client.query(sql);
      return;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if ((code === '42710' || code === '23505') && sql.startsWith('create role')) return;
      const raced = code === 'XX000' && /concurrently/.test((err as Error).message);
      if (!raced || attempt >= 5) throw err;
      await new Promise((r) => setTimeout(r, 20 * attempt));
    }
  }
}

/** See the top of this file. The caller holds the migrations' advisory lock; the session ends as catraca_owner. */
export async function bootstrapRoles(client: pg.Client, passwords: RolePasswords = {}): Promise<RolesBootstrap> {
  const { rows } = await client.query<{ user: string; super: boolean; createrole: boolean; owner: boolean }>(
    `select current_user as user, r.rolsuper as super, r.rolcreaterole as createrole,
            case when exists (select 1 from pg_roles where rolname = $1) then pg_has_role(current_user, $1, 'MEMBER') else false end as owner
       from pg_roles r where r.rolname = current_user`,
    [OWNER_ROLE],
  );
  const me = rows[0];
  if (!me.super && !me.createrole) {
    if (!me.owner) throw new RolesBootstrapError(me.user);
    const { rows: present } = await client.query<{ n: number }>('select count(*)::int as n from pg_roles where rolname = any($1)', [ALL_ROLES]);
    if (present[0].n !== ALL_ROLES.length) throw new RolesBootstrapError(me.user);
    if (me.user !== OWNER_ROLE) await client.query(`set role ${OWNER_ROLE}`);
    return { as: 'owner', passwords: [] };
  }
  await createRoles(client);
  const set = await applyPasswords(client, passwords, me.super);
  if (!me.super) await retried(client, `grant ${OWNER_ROLE} to current_user`);
  await ownDatabase(client);
  await client.query(`set role ${OWNER_ROLE}`);
  return { as: 'bootstrap', passwords: set };
}

async function createRoles(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ rolname: string }>('select rolname from pg_roles where rolname = any($1)', [ALL_ROLES]);
  const present = new Set(rows.map((r) => r.rolname));
  for (const role of ALL_ROLES) {
    if (present.has(role)) continue;
    // no password yet: a LOGIN role without one cannot authenticate by password
    await retried(client, `create role ${role} ${role === OWNER_ROLE ? 'nologin' : 'login'}`);
  }
}

async function applyPasswords(client: pg.Client, passwords: RolePasswords, superuser: boolean): Promise<LoginRole[]> {
  const given = LOGIN_ROLES.filter((r) => passwords[r]);
  if (given.length === 0) return [];
  // pg_authid (the stored verifiers) is readable by superusers only; others set every password
  const stored = superuser
    ? new Map(
        (
          await client.query<{ rolname: string; rolpassword: string | null }>('select rolname, rolpassword from pg_authid where rolname = any($1)', [
            given.map(roleName),
          ])
        ).rows.map((r) => [r.rolname, r.rolpassword]),
      )
    : new Map<string, string | null>();
  for (const role of given) {
    const password = passwords[role]!;
    if (scramMatches(stored.get(roleName(role)) ?? null, password)) continue;
    await retried(client, `alter role ${roleName(role)} login password '${scramVerifier(password)}'`);
  }
  return given;
}

/**
 * catraca_owner owns the database and every object of its public schema (a database migrated
 * before the roles existed has them owned by whoever ran the migrations); nobody else may create
 * objects in the schema.
 */
async function ownDatabase(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ owner: string }>('select pg_get_userbyid(datdba) as owner from pg_database where datname = current_database()');
  if (rows[0].owner !== OWNER_ROLE) await client.query(`do $$ begin execute format('alter database %I owner to ${OWNER_ROLE}', current_database()); end $$`);
  await client.query(`revoke create on schema public from public; grant usage, create on schema public to ${OWNER_ROLE}`);
  const { rows: objects } = await client.query<{ kind: string; name: string }>(
    `select case when c.relkind = 'S' then 'sequence' when c.relkind in ('v', 'm') then (case c.relkind when 'v' then 'view' else 'materialized view' end)
                 when c.relkind = 'f' then 'foreign table' else 'table' end as kind,
            format('%I.%I', n.nspname, c.relname) as name
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'f', 'S') and pg_get_userbyid(c.relowner) <> $1
        and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype in ('a', 'i', 'e'))
     union all
     select case p.prokind when 'p' then 'procedure' else 'function' end, p.oid::regprocedure::text
       from pg_proc p where p.pronamespace = 'public'::regnamespace and p.prokind in ('f', 'p') and pg_get_userbyid(p.proowner) <> $1
        and not exists (select 1 from pg_depend d where d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
     union all
     select case t.typtype when 'd' then 'domain' else 'type' end, t.oid::regtype::text
       from pg_type t where t.typnamespace = 'public'::regnamespace and t.typtype in ('e', 'd', 'r') and pg_get_userbyid(t.typowner) <> $1
        and not exists (select 1 from pg_depend d where d.classid = 'pg_type'::regclass and d.objid = t.oid and d.deptype = 'e')`,
    [OWNER_ROLE],
  );
  // a table's indexes and the sequences of its serial columns follow it
  for (const o of objects) await client.query(`alter ${o.kind} ${o.name} owner to ${OWNER_ROLE}`);
}
