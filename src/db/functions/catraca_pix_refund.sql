-- Refund of a Pix top-up: a debit exactly once per external id, never below zero. When the
-- refund exceeds what the tenant has available (balance - holds), only the available part is
-- debited and the row's note says so (status 'shortfall'); the caller logs it.
create or replace function catraca_pix_refund(p_tenant text, p_amount bigint, p_external_id text, p_note text)
returns table (status text, debited bigint, balance bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_balance bigint;
  v_held bigint;
  v_debit bigint;
begin
  if p_amount <= 0 then raise exception 'refund amount must be positive'; end if;
  select t.balance_micros, t.held_micros into v_balance, v_held from tenants t where t.id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint, 0::bigint; return;
  end if;
  if exists (select 1 from ledger where external_id = p_external_id) then
    return query select 'duplicate'::text, 0::bigint, v_balance; return;
  end if;
  v_debit := least(p_amount, greatest(v_balance - v_held, 0));
  update tenants set balance_micros = balance_micros - v_debit where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, cost_micros, note)
    values (p_tenant, 'debit', v_debit, v_balance, 'pix_refund', p_external_id, p_amount,
            case when v_debit < p_amount
                 then coalesce(p_note || '; ', '') || 'shortfall: refund exceeded the available balance by ' || (p_amount - v_debit)::text || ' micro-BRL'
                 else p_note end);
  return query select case when v_debit < p_amount then 'shortfall' else 'refunded' end, v_debit, v_balance;
end $$;
revoke all on function catraca_pix_refund(text, bigint, text, text) from public;
grant execute on function catraca_pix_refund(text, bigint, text, text) to catraca_portal;
