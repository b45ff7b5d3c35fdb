-- An operator's adjustment from the console, exact to the micro-real, with its audit row and the
-- balance notifications it makes (catraca_notify_balance) in the same transaction (source
-- 'adjustment'; the ledger's kinds stay credit and debit, so `catraca ledger check` holds):
--   credit  gives back what a request should not have cost (a failed vendor call): with a request,
--           at most what that request was debited less what earlier adjustments gave back for it;
--   debit   takes what a tenant owes (a shortfall): never more than the available balance
--           (balance − held), so a balance never goes below zero nor below its holds.
-- p_nonce is the form's: a form sent twice adjusts once ('duplicate').
create or replace function catraca_console_adjust(p_operator text, p_ip text, p_tenant text, p_kind text, p_amount bigint, p_request_id text,
                                                  p_note text, p_reason text, p_nonce text)
returns table (status text, balance bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_status text;
  v_before bigint;
  v_held bigint;
  v_balance bigint;
  v_debited bigint;
  v_returned bigint;
  v_ledger bigint;
begin
  if p_kind is null or p_kind not in ('credit', 'debit') then raise exception 'an adjustment is a credit or a debit'; end if;
  -- the checks, the operator, the tenant's row locked, the nonce
  select l.status, l.balance, l.held into v_status, v_before, v_held
    from catraca_console_balance_lock('adjustment', p_operator, p_tenant, p_amount, p_reason, p_nonce) l;
  if v_status is not null then
    return query select v_status, v_before; return;
  end if;
  if p_request_id is not null then
    select l.amount_micros into v_debited from ledger l where l.request_id = p_request_id and l.tenant_id = p_tenant and l.kind = 'debit';
    if not found then
      return query select 'unknown_request'::text, v_before; return;
    end if;
    if p_kind = 'credit' then
      select coalesce(sum(l.amount_micros), 0) into v_returned from ledger l
       where l.ref_request_id = p_request_id and l.tenant_id = p_tenant and l.kind = 'credit' and l.source = 'adjustment';
      if p_amount > v_debited - v_returned then
        return query select 'exceeds_request'::text, v_before; return;
      end if;
    end if;
  end if;
  if p_kind = 'debit' and p_amount > v_before - v_held then
    return query select 'insufficient'::text, v_before; return;
  end if;
  update tenants set balance_micros = balance_micros + case when p_kind = 'credit' then p_amount else -p_amount end
   where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, ref_request_id, note)
    values (p_tenant, p_kind, p_amount, v_balance, 'adjustment', 'console:' || p_nonce, p_request_id, nullif(btrim(p_note), ''))
    returning id into v_ledger;
  -- balance.low / balance.depleted (or their re-arming), in this transaction: the notifier's relay publishes them
  perform catraca_notify_balance(array[p_tenant]);
  insert into console_audit (operator_id, action, ip, tenant_id, target, reason, before, after)
    values (p_operator, 'adjustment', p_ip, p_tenant, coalesce(p_request_id, v_ledger::text), btrim(p_reason),
            jsonb_build_object('balance_micros', v_before::text, 'held_micros', v_held::text),
            jsonb_build_object('balance_micros', v_balance::text, 'held_micros', v_held::text, 'kind', p_kind, 'amount_micros', p_amount::text,
                               'ledger_id', v_ledger::text, 'request_id', p_request_id, 'note', nullif(btrim(p_note), '')));
  return query select case when p_kind = 'credit' then 'credited' else 'debited' end, v_balance;
end $$;
revoke all on function catraca_console_adjust(text, text, text, text, bigint, text, text, text, text) from public;
grant execute on function catraca_console_adjust(text, text, text, text, bigint, text, text, text, text) to catraca_console;
