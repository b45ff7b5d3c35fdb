-- Settlement: exactly once per request id, against the hold the request was admitted under: its
-- own hold (deleted) or its door's lease (reduced by the cost; a closing lease with nothing left is
-- deleted). A hold of another tenant or key is never touched. Debits the cost, never below zero: a
-- cost above what the balance can pay is recorded as a shortfall. Locks the key, then the tenant.
-- p_detail: {cached, cw, cw1h, reasoning, route, end_user, deployment, region, country, batch_id}, recorded on the ledger row.
create or replace function catraca_settle(
  p_request_id text, p_tenant text, p_key text, p_cost bigint, p_model text,
  p_input integer, p_output integer, p_estimated boolean, p_outcome text, p_at timestamptz, p_hold text,
  p_detail jsonb default null)
returns table (status text, debited bigint, balance bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  h holds%rowtype;
  v_release bigint := 0;
  v_balance bigint;
  v_held bigint;
  v_debit bigint;
  v_win timestamptz;
  v_limit_reset text;
begin
  select limit_reset into v_limit_reset from api_keys where id = p_key for update;
  select t.balance_micros, t.held_micros into v_balance, v_held from tenants t where t.id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint, 0::bigint; return;
  end if;
  if exists (select 1 from ledger where request_id = p_request_id) then
    return query select 'duplicate'::text, 0::bigint, v_balance; return;
  end if;
  select * into h from holds where request_id = coalesce(p_hold, p_request_id) and tenant_id = p_tenant and key_id = p_key for update;
  if found then
    if h.kind = 'lease' then
      v_release := least(h.amount_micros, p_cost);
      if h.closing and h.amount_micros = v_release then
        delete from holds where request_id = h.request_id;
      else
        update holds set amount_micros = amount_micros - v_release, spent_micros = spent_micros + p_cost where request_id = h.request_id;
      end if;
    else
      v_release := h.amount_micros;
      delete from holds where request_id = h.request_id;
    end if;
  end if;
  v_debit := least(p_cost, v_balance - (v_held - v_release));
  update tenants set balance_micros = balance_micros - v_debit, held_micros = held_micros - v_release
    where id = p_tenant returning balance_micros into v_balance;
  v_win := catraca_window_start(v_limit_reset, p_at);
  update api_keys set
      held_micros = held_micros - v_release,
      usage_micros = usage_micros + v_debit,
      window_usage_micros = case when window_start = v_win then window_usage_micros + v_debit else v_debit end,
      window_start = v_win
    where id = p_key;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model,
                      input_tokens, output_tokens, cost_micros, estimated, outcome, note, created_at,
                      cached_tokens, cache_write_tokens, cache_write_1h_tokens, reasoning_tokens, route, end_user,
                      deployment, region, country, batch_id)
    values (p_tenant, 'debit', v_debit, v_balance, 'request', p_request_id, p_key, p_model,
            p_input, p_output, p_cost, p_estimated, p_outcome,
            case when v_debit < p_cost then 'shortfall: cost exceeded the available balance' end, p_at,
            (p_detail->>'cached')::integer, (p_detail->>'cw')::integer, (p_detail->>'cw1h')::integer,
            (p_detail->>'reasoning')::integer, p_detail->>'route', p_detail->>'end_user',
            p_detail->>'deployment', p_detail->>'region', p_detail->>'country', p_detail->>'batch_id');
  return query select 'settled'::text, v_debit, v_balance;
end $$;
revoke all on function catraca_settle(text, text, text, bigint, text, integer, integer, boolean, text, timestamptz, text, jsonb) from public;
grant execute on function catraca_settle(text, text, text, bigint, text, integer, integer, boolean, text, timestamptz, text, jsonb) to catraca_metering;
