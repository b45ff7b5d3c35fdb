-- Team members (issue 20, item 1): invitations by e-mail link, keys listed by who created them,
-- and the rule that a tenant keeps an owner.

-- An invitation to join a tenant with a role. token_hash is the SHA-256 of the 256 random bits in
-- the e-mailed link (the table alone opens nothing); the link works once (accepted_at), until
-- expires_at, unless revoked, and only for `email`: accepting creates that address's login. At
-- most one open invitation per address and tenant (inviting again revokes the previous link).
create table portal_invitations (
  id          text primary key,
  token_hash  bytea not null unique,
  tenant_id   text not null references tenants(id),
  email       text not null check (email = lower(email)),
  role        text not null check (role in ('owner', 'admin', 'billing', 'developer')),
  invited_by  text references portal_users(id) on delete set null,
  created_at  timestamptz not null default now(),
  expires_at  timestamptz not null,
  accepted_at timestamptz,
  revoked_at  timestamptz
);
create unique index portal_invitations_open on portal_invitations (tenant_id, email) where accepted_at is null and revoked_at is null;
create index portal_invitations_tenant on portal_invitations (tenant_id, created_at);
create index portal_invitations_expires on portal_invitations (expires_at);

-- A developer's keys page lists the keys they created.
create index api_keys_created_by on api_keys (tenant_id, created_by) where created_by is not null;

grant select, insert, update, delete on portal_invitations to catraca_portal;
-- `catraca tenant members`: who belongs to a tenant, never a password hash.
grant select (id, tenant_id, email, role, created_at, email_verified_at) on portal_users to catraca_admin;

-- A tenant with members keeps an owner (the body as of this migration; the current one is
-- src/db/functions/catraca_keep_an_owner.sql).
create or replace function catraca_keep_an_owner()
returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if exists (select 1 from portal_users where tenant_id = old.tenant_id)
     and not exists (select 1 from portal_users where tenant_id = old.tenant_id and role = 'owner') then
    raise exception 'tenant % would have no owner: a tenant keeps at least one', old.tenant_id using errcode = 'integrity_constraint_violation';
  end if;
  return null;
end $$;
revoke all on function catraca_keep_an_owner() from public;
create constraint trigger portal_users_keep_an_owner after update of role or delete on portal_users
  deferrable initially deferred for each row when (old.role = 'owner') execute function catraca_keep_an_owner();
