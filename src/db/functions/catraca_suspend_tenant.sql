-- Suspends a tenant's admission (no request of its keys is admitted until an operator reactivates
-- it): metering calls it when a settlement could not debit in full. Keeps the first reason.
-- Returns whether this call suspended it (false: it already was, or there is no such tenant).
create or replace function catraca_suspend_tenant(p_tenant text, p_reason text)
returns boolean
language sql
security definer
set search_path = public, pg_temp
as $$
  update tenants set suspended_at = now(), suspended_reason = p_reason
   where id = p_tenant and suspended_at is null
  returning true;
$$;
revoke all on function catraca_suspend_tenant(text, text) from public;
grant execute on function catraca_suspend_tenant(text, text) to catraca_metering;
