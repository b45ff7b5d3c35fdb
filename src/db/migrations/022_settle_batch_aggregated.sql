-- Settlement of a batch with one write per row touched, not per request: the batch's tenants,
-- keys and leases are read once under their locks, every request is applied in order to those
-- values in memory (exactly catraca_settle's rules: exactly once per request id, debit never below
-- zero, a lease releases what its request cost, a request's own hold is released whole), then
-- each tenant, key and lease is written once, the request holds deleted in one statement and the
-- ledger rows inserted in one statement. Same results, in the items' order, as calling
-- catraca_settle per item.
create or replace function catraca_settle_batch(p_items jsonb)
returns table (request_id text, status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  item record;
  t_ids text[]; t_bal bigint[]; t_held bigint[];
  k_ids text[]; k_held bigint[]; k_usage bigint[]; k_win timestamptz[]; k_winuse bigint[]; k_reset text[];
  h_ids text[]; h_amount bigint[]; h_spent bigint[]; h_kind text[]; h_closing boolean[]; h_tenant text[]; h_key text[]; h_gone boolean[];
  seen text[] := '{}';
  l_tenant text[] := '{}'; l_amount bigint[] := '{}'; l_after bigint[] := '{}'; l_req text[] := '{}'; l_key text[] := '{}';
  l_model text[] := '{}'; l_in integer[] := '{}'; l_out integer[] := '{}'; l_cost bigint[] := '{}'; l_est boolean[] := '{}';
  l_outcome text[] := '{}'; l_note text[] := '{}'; l_at timestamptz[] := '{}';
  ti integer; ki integer; hi integer;
  v_cost bigint; v_release bigint; v_debit bigint; v_win timestamptz;
begin
  -- lock order of every catraca function: keys (sorted), then tenants (sorted)
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  perform 1 from tenants where id in (select distinct x.tenant_id from jsonb_to_recordset(p_items) as x(tenant_id text)) order by id for update;

  select array_agg(t.id), array_agg(t.balance_micros), array_agg(t.held_micros) into t_ids, t_bal, t_held
    from tenants t where t.id in (select distinct x.tenant_id from jsonb_to_recordset(p_items) as x(tenant_id text));
  select array_agg(k.id), array_agg(k.held_micros), array_agg(k.usage_micros), array_agg(k.window_start), array_agg(k.window_usage_micros), array_agg(k.limit_reset)
    into k_ids, k_held, k_usage, k_win, k_winuse, k_reset
    from api_keys k where k.id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text));
  perform 1 from holds h where h.request_id in (select distinct coalesce(x.hold, x.request_id) from jsonb_to_recordset(p_items) as x(request_id text, hold text))
    order by h.request_id for update;
  select array_agg(h.request_id), array_agg(h.amount_micros), array_agg(h.spent_micros), array_agg(h.kind), array_agg(h.closing),
         array_agg(h.tenant_id), array_agg(h.key_id), array_agg(false)
    into h_ids, h_amount, h_spent, h_kind, h_closing, h_tenant, h_key, h_gone
    from holds h where h.request_id in (select distinct coalesce(x.hold, x.request_id) from jsonb_to_recordset(p_items) as x(request_id text, hold text));
  -- requests already settled (a redelivery)
  select array_agg(l.request_id) into seen from ledger l
    where l.request_id in (select x.request_id from jsonb_to_recordset(p_items) as x(request_id text));
  seen := coalesce(seen, '{}');

  for item in
    select x.*
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, cost text, model text,
                      input integer, output integer, estimated boolean, outcome text, at timestamptz, hold text))
           with ordinality as x(request_id, tenant_id, key_id, cost, model, input, output, estimated, outcome, at, hold, ord)
     order by x.ord
  loop
    ti := array_position(t_ids, item.tenant_id);
    if ti is null then
      return query select item.request_id, 'unknown_tenant'::text, 0::bigint, 0::bigint;
      continue;
    end if;
    if item.request_id = any(seen) then
      return query select item.request_id, 'duplicate'::text, 0::bigint, t_bal[ti];
      continue;
    end if;
    seen := seen || item.request_id;
    ki := array_position(k_ids, item.key_id);
    v_cost := item.cost::bigint;
    v_release := 0;
    hi := array_position(h_ids, coalesce(item.hold, item.request_id));
    if hi is not null and not h_gone[hi] and h_tenant[hi] = item.tenant_id and h_key[hi] = item.key_id then
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
      v_win := catraca_window_start(k_reset[ki], item.at);
      k_held[ki] := k_held[ki] - v_release;
      k_usage[ki] := k_usage[ki] + v_debit;
      k_winuse[ki] := case when k_win[ki] = v_win then k_winuse[ki] + v_debit else v_debit end;
      k_win[ki] := v_win;
    end if;
    l_tenant := l_tenant || item.tenant_id; l_amount := l_amount || v_debit; l_after := l_after || t_bal[ti];
    l_req := l_req || item.request_id; l_key := l_key || item.key_id; l_model := l_model || item.model;
    l_in := l_in || item.input; l_out := l_out || item.output; l_cost := l_cost || v_cost; l_est := l_est || item.estimated;
    l_outcome := l_outcome || item.outcome; l_at := l_at || item.at;
    l_note := l_note || case when v_debit < v_cost then 'shortfall: cost exceeded the available balance' end;
    return query select item.request_id, 'settled'::text, v_debit, t_bal[ti];
  end loop;

  update tenants t set balance_micros = v.bal, held_micros = v.held
    from unnest(t_ids, t_bal, t_held) as v(id, bal, held) where t.id = v.id;
  update api_keys k set held_micros = v.held, usage_micros = v.usage, window_start = v.win, window_usage_micros = v.winuse
    from unnest(k_ids, k_held, k_usage, k_win, k_winuse) as v(id, held, usage, win, winuse) where k.id = v.id;
  delete from holds h using unnest(h_ids, h_gone) as v(id, gone) where h.request_id = v.id and v.gone;
  update holds h set amount_micros = v.amount, spent_micros = v.spent
    from unnest(h_ids, h_amount, h_spent, h_gone, h_kind) as v(id, amount, spent, gone, kind)
   where h.request_id = v.id and not v.gone and v.kind = 'lease';
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model,
                      input_tokens, output_tokens, cost_micros, estimated, outcome, note, created_at)
    select v.tenant, 'debit', v.amount, v.after, 'request', v.req, v.key, v.model, v.inp, v.outp, v.cost, v.est, v.outcome, v.note, v.at
      from unnest(l_tenant, l_amount, l_after, l_req, l_key, l_model, l_in, l_out, l_cost, l_est, l_outcome, l_note, l_at)
        as v(tenant, amount, after, req, key, model, inp, outp, cost, est, outcome, note, at);
end $$;
