-- Credit (grant, Pix): exactly once per external id when one is given.
create or replace function catraca_credit(p_tenant text, p_amount bigint, p_source text, p_external_id text, p_note text)
returns table (status text, balance bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare v_balance bigint;
begin
  if p_amount <= 0 then raise exception 'credit amount must be positive'; end if;
  select balance_micros into v_balance from tenants where id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint; return;
  end if;
  if p_external_id is not null and exists (select 1 from ledger where external_id = p_external_id) then
    return query select 'duplicate'::text, v_balance; return;
  end if;
  update tenants set balance_micros = balance_micros + p_amount where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, note)
    values (p_tenant, 'credit', p_amount, v_balance, p_source, p_external_id, p_note);
  return query select 'credited'::text, v_balance;
end $$;
revoke all on function catraca_credit(text, bigint, text, text, text) from public;
grant execute on function catraca_credit(text, bigint, text, text, text) to catraca_admin;
