-- Settles many usage messages in one transaction, with one write per row touched, not per
-- request: the batch's keys, tenants and holds are read once under their locks (keys sorted, then
-- tenants sorted, then holds), every request is applied in order to those values in memory
-- (exactly catraca_settle's rules: exactly once per request id, debit never below zero, a lease
-- releases what its request cost, a request's own hold is released whole), then each tenant, key
-- and lease is written once, the request holds deleted in one statement and the ledger rows
-- inserted in one statement. Same results, in the items' order, as calling catraca_settle per item;
-- the ledger rows also record each request's cache and reasoning tokens, route, end user and where it ran.
--  * accounts are found by `= any(array)`, and the ledger by one probe of its request_id index per
--    request (an `in (select … from jsonb_to_recordset(…))` lookup was hashed against a sequential
--    scan of the whole ledger);
--  * the items are read from the jsonb once, into arrays, and each account is locked and read in
--    one statement;
--  * the loop runs no SQL: results and ledger values go into arrays by item position, and the
--    result rows and the ledger rows come from them in one statement each.
create or replace function catraca_settle_batch(p_items jsonb)
returns table (request_id text, status text, debited bigint, balance bigint)
language plpgsql
-- Custom plans (the default for the first calls) see 1-element arrays, so every generic plan looks
-- dearer than them and each call would be planned again: ~10% of the function's CPU.
set plan_cache_mode = force_generic_plan
security definer
set search_path = public, pg_temp
as $$
declare
  n integer;
  r_req text[]; r_tenant text[]; r_key text[]; r_cost text[]; r_model text[]; r_in integer[]; r_out integer[];
  r_est boolean[]; r_outcome text[]; r_at timestamptz[]; r_hold text[];
  r_cached integer[]; r_cw integer[]; r_cw1h integer[]; r_reasoning integer[]; r_route text[]; r_user text[];
  r_dep text[]; r_region text[]; r_country text[]; r_batch text[];
  t_ids text[]; t_bal bigint[]; t_held bigint[];
  k_ids text[]; k_held bigint[]; k_usage bigint[]; k_win timestamptz[]; k_winuse bigint[]; k_reset text[];
  h_ids text[]; h_amount bigint[]; h_spent bigint[]; h_kind text[]; h_closing boolean[]; h_tenant text[]; h_key text[]; h_gone boolean[];
  seen text[];
  -- per item: its result, and what its ledger row records (status 'settled' only)
  o_status text[]; o_debit bigint[]; o_bal bigint[];
  i integer; ti integer; ki integer; hi integer;
  v_cost bigint; v_release bigint; v_debit bigint; v_win timestamptz;
begin
  select count(*)::integer, array_agg(x.request_id), array_agg(x.tenant_id), array_agg(x.key_id), array_agg(x.cost), array_agg(x.model),
         array_agg(x.input), array_agg(x.output), array_agg(x.estimated), array_agg(x.outcome), array_agg(x.at), array_agg(coalesce(x.hold, x.request_id)),
         array_agg(x.cached), array_agg(x.cw), array_agg(x.cw1h), array_agg(x.reasoning), array_agg(x.route), array_agg(x.end_user),
         array_agg(x.deployment), array_agg(x.region), array_agg(x.country), array_agg(x.batch_id)
    into n, r_req, r_tenant, r_key, r_cost, r_model, r_in, r_out, r_est, r_outcome, r_at, r_hold,
         r_cached, r_cw, r_cw1h, r_reasoning, r_route, r_user, r_dep, r_region, r_country, r_batch
    from (select *
            from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, cost text, model text,
                            input integer, output integer, estimated boolean, outcome text, at timestamptz, hold text,
                            cached integer, cw integer, cw1h integer, reasoning integer, route text, end_user text,
                            deployment text, region text, country text, batch_id text))
                 with ordinality as j(request_id, tenant_id, key_id, cost, model, input, output, estimated, outcome, at, hold,
                                      cached, cw, cw1h, reasoning, route, end_user, deployment, region, country, batch_id, ord)
           order by j.ord) x;
  if n = 0 then return; end if;

  -- lock order of every catraca function: keys (sorted), then tenants (sorted)
  select array_agg(k.id), array_agg(k.held_micros), array_agg(k.usage_micros), array_agg(k.window_start), array_agg(k.window_usage_micros), array_agg(k.limit_reset)
    into k_ids, k_held, k_usage, k_win, k_winuse, k_reset
    from (select * from api_keys where id = any(r_key) order by id for update) k;
  select array_agg(t.id), array_agg(t.balance_micros), array_agg(t.held_micros) into t_ids, t_bal, t_held
    from (select * from tenants where id = any(r_tenant) order by id for update) t;
  select array_agg(h.request_id), array_agg(h.amount_micros), array_agg(h.spent_micros), array_agg(h.kind), array_agg(h.closing),
         array_agg(h.tenant_id), array_agg(h.key_id), array_agg(false)
    into h_ids, h_amount, h_spent, h_kind, h_closing, h_tenant, h_key, h_gone
    from (select * from holds where holds.request_id = any(r_hold) order by holds.request_id for update) h;
  -- requests already settled (a redelivery); the lateral limit keeps it one index probe per request
  select coalesce(array_agg(l.request_id), '{}') into seen
    from unnest(r_req) as r(id), lateral (select l.request_id from ledger l where l.request_id = r.id limit 1) l;

  o_status := array_fill(null::text, array[n]); o_debit := array_fill(0::bigint, array[n]); o_bal := array_fill(0::bigint, array[n]);
  for i in 1 .. n loop
    ti := array_position(t_ids, r_tenant[i]);
    if ti is null then
      o_status[i] := 'unknown_tenant';
      continue;
    end if;
    o_bal[i] := t_bal[ti];
    if r_req[i] = any(seen) then
      o_status[i] := 'duplicate';
      continue;
    end if;
    seen := seen || r_req[i];
    ki := array_position(k_ids, r_key[i]);
    v_cost := r_cost[i]::bigint;
    v_release := 0;
    hi := array_position(h_ids, r_hold[i]);
    if hi is not null and not h_gone[hi] and h_tenant[hi] = r_tenant[i] and h_key[hi] = r_key[i] then
      if h_kind[hi] = 'lease' then
        v_release := least(h_amount[hi], v_cost);
        h_amount[hi] := h_amount[hi] - v_release;
        h_spent[hi] := h_spent[hi] + v_cost;
        if h_closing[hi] and h_amount[hi] = 0 then h_gone[hi] := true; end if;
      else
        v_release := h_amount[hi];
        h_amount[hi] := 0;
        h_gone[hi] := true;
      end if;
    end if;
    v_debit := least(v_cost, t_bal[ti] - (t_held[ti] - v_release));
    t_bal[ti] := t_bal[ti] - v_debit;
    t_held[ti] := t_held[ti] - v_release;
    if ki is not null then
      v_win := catraca_window_start(k_reset[ki], r_at[i]);
      k_held[ki] := k_held[ki] - v_release;
      k_usage[ki] := k_usage[ki] + v_debit;
      k_winuse[ki] := case when k_win[ki] = v_win then k_winuse[ki] + v_debit else v_debit end;
      k_win[ki] := v_win;
    end if;
    o_status[i] := 'settled'; o_debit[i] := v_debit; o_bal[i] := t_bal[ti];
  end loop;

  if t_ids is not null then
    update tenants t set balance_micros = v.bal, held_micros = v.held
      from unnest(t_ids, t_bal, t_held) as v(id, bal, held) where t.id = v.id;
  end if;
  if k_ids is not null then
    update api_keys k set held_micros = v.held, usage_micros = v.usage, window_start = v.win, window_usage_micros = v.winuse
      from unnest(k_ids, k_held, k_usage, k_win, k_winuse) as v(id, held, usage, win, winuse) where k.id = v.id;
  end if;
  if true = any(h_gone) then
    delete from holds h using unnest(h_ids, h_gone) as v(id, gone) where h.request_id = v.id and v.gone;
  end if;
  if 'lease' = any(h_kind) then
    update holds h set amount_micros = v.amount, spent_micros = v.spent
      from unnest(h_ids, h_amount, h_spent, h_gone, h_kind) as v(id, amount, spent, gone, kind)
     where h.request_id = v.id and not v.gone and v.kind = 'lease';
  end if;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model,
                      input_tokens, output_tokens, cost_micros, estimated, outcome, note, created_at,
                      cached_tokens, cache_write_tokens, cache_write_1h_tokens, reasoning_tokens, route, end_user,
                      deployment, region, country, batch_id)
    select v.tenant, 'debit', v.debit, v.bal, 'request', v.req, v.key, v.model, v.inp, v.outp, v.cost::bigint, v.est, v.outcome,
           case when v.debit < v.cost::bigint then 'shortfall: cost exceeded the available balance' end, v.at,
           v.cached, v.cw, v.cw1h, v.reasoning, v.route, v.end_user, v.dep, v.region, v.country, v.batch
      from unnest(r_tenant, o_debit, o_bal, r_req, r_key, r_model, r_in, r_out, r_cost, r_est, r_outcome, r_at, o_status,
                  r_cached, r_cw, r_cw1h, r_reasoning, r_route, r_user, r_dep, r_region, r_country, r_batch)
        as v(tenant, debit, bal, req, key, model, inp, outp, cost, est, outcome, at, status, cached, cw, cw1h, reasoning, route, end_user,
             dep, region, country, batch)
     where v.status = 'settled';
  return query select v.req, v.status, v.debit, v.bal
    from unnest(r_req, o_status, o_debit, o_bal) with ordinality as v(req, status, debit, bal, ord) order by v.ord;
end $$;
revoke all on function catraca_settle_batch(jsonb) from public;
grant execute on function catraca_settle_batch(jsonb) to catraca_metering;
