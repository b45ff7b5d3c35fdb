-- The trigger function of portal_users_keep_an_owner (migration 036): a tenant that has members
-- keeps at least one owner. Deferred to the commit, so one transaction may demote an owner and
-- promote another. It sees only committed rows of other transactions: two concurrent changes are
-- kept from both passing by the portal, which locks the tenant's owners first (src/portal/members.ts).
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
