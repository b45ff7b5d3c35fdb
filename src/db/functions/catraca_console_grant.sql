-- An operator's grant of credit from the console: the ledger's credit (source 'grant', the note),
-- the audit row (operator, address, reason, balance before and after) and the balance notifications
-- (catraca_notify_balance) in one transaction.
-- p_nonce is the form's: a form sent twice grants once ('duplicate').
create or replace function catraca_console_grant(p_operator text, p_ip text, p_tenant text, p_amount bigint, p_note text, p_reason text, p_nonce text)
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
  v_ledger bigint;
begin
  -- the checks, the operator, the tenant's row locked, the nonce
  select l.status, l.balance, l.held into v_status, v_before, v_held
    from catraca_console_balance_lock('grant', p_operator, p_tenant, p_amount, p_reason, p_nonce) l;
  if v_status is not null then
    return query select v_status, v_before; return;
  end if;
  update tenants set balance_micros = balance_micros + p_amount where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, note)
    values (p_tenant, 'credit', p_amount, v_balance, 'grant', 'console:' || p_nonce, nullif(btrim(p_note), ''))
    returning id into v_ledger;
  -- balance.low / balance.depleted (or their re-arming), in this transaction: the notifier's relay publishes them
  perform catraca_notify_balance(array[p_tenant]);
  insert into console_audit (operator_id, action, ip, tenant_id, target, reason, before, after)
    values (p_operator, 'grant', p_ip, p_tenant, v_ledger::text, btrim(p_reason),
            jsonb_build_object('balance_micros', v_before::text, 'held_micros', v_held::text),
            jsonb_build_object('balance_micros', v_balance::text, 'held_micros', v_held::text, 'amount_micros', p_amount::text,
                               'ledger_id', v_ledger::text, 'note', nullif(btrim(p_note), '')));
  return query select 'credited'::text, v_balance;
end $$;
revoke all on function catraca_console_grant(text, text, text, bigint, text, text, text) from public;
grant execute on function catraca_console_grant(text, text, text, bigint, text, text, text) to catraca_console;
