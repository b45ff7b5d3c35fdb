-- What an operator's grant (catraca_console_grant) or adjustment (catraca_console_adjust) does
-- before it moves a balance (it runs as the owner, called by them; no process calls it): the
-- amount, reason and form nonce checked (an exception names p_action), the operator enabled, the
-- tenant's row locked (for update, until the caller's transaction ends) and the nonce not used yet.
-- One row: status null and the tenant's balance and held amount when the caller may go on; else
-- the caller's answer: 'unknown_operator' or 'unknown_tenant' (balance 0), 'duplicate' (the
-- balance as it is: a form sent twice moves it once).
create or replace function catraca_console_balance_lock(p_action text, p_operator text, p_tenant text, p_amount bigint, p_reason text, p_nonce text)
returns table (status text, balance bigint, held bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_noun text := case p_action when 'grant' then 'a grant' when 'adjustment' then 'an adjustment' end;
  v_before bigint;
  v_held bigint;
begin
  if v_noun is null then raise exception 'unknown console balance action %', p_action; end if;
  if p_amount is null or p_amount <= 0 then raise exception '% amount must be positive', p_action; end if;
  if coalesce(btrim(p_reason), '') = '' then raise exception '% needs a reason', v_noun; end if;
  if coalesce(p_nonce, '') = '' then raise exception '% needs the form nonce', v_noun; end if;
  if not exists (select 1 from operators where id = p_operator and disabled_at is null) then
    return query select 'unknown_operator'::text, 0::bigint, 0::bigint; return;
  end if;
  select t.balance_micros, t.held_micros into v_before, v_held from tenants t where t.id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint, 0::bigint; return;
  end if;
  if exists (select 1 from ledger where external_id = 'console:' || p_nonce) then
    return query select 'duplicate'::text, v_before, v_held; return;
  end if;
  return query select null::text, v_before, v_held;
end $$;
revoke all on function catraca_console_balance_lock(text, text, text, bigint, text, text) from public;
