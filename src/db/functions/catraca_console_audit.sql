-- One row of the operators' audit log (console_audit, append-only): the only way the console and
-- the admin CLI write it outside the functions that move money or change state (which insert their
-- own row in their transaction). The time and id are the database's; the action must be one of
-- the console's (src/console/audit.ts), the operator, when named, must exist. Called inside the
-- transaction of the change it records, so the row exists exactly when the change does.
create or replace function catraca_console_audit(p_operator text, p_operator_email text, p_action text, p_ip text, p_tenant text, p_target text,
                                                 p_reason text, p_before jsonb, p_after jsonb)
returns bigint
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_id bigint;
begin
  if p_action is null or p_action not in ('login', 'login_failed', 'login_throttled', 'totp_failed', 'recovery_code_used', 'logout', 'grant',
                                          'adjustment', 'suspend', 'reactivate', 'key_revoke', 'price_change', 'vendor_cost_change',
                                          'deployment_price_change', 'ledger_check', 'operator_create', 'operator_disable', 'operator_reset',
                                          'nfse_retry', 'fx_pin') then
    raise exception 'unknown console audit action %', p_action using errcode = '22023';
  end if;
  if p_operator is not null and not exists (select 1 from operators where id = p_operator) then
    raise exception 'unknown operator %', p_operator using errcode = '22023';
  end if;
  insert into console_audit (operator_id, operator_email, action, ip, tenant_id, target, reason, before, after)
    values (p_operator, left(p_operator_email, 254), p_action, left(p_ip, 100), p_tenant, left(p_target, 300), left(p_reason, 1000), p_before, p_after)
    returning id into v_id;
  return v_id;
end $$;
revoke all on function catraca_console_audit(text, text, text, text, text, text, text, jsonb, jsonb) from public;
grant execute on function catraca_console_audit(text, text, text, text, text, text, text, jsonb, jsonb) to catraca_console, catraca_admin;
