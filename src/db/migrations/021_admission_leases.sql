-- Admission leases: a front door reserves a slice of a tenant's (and key's) balance in one
-- row-locked call and admits requests from it in memory, so a busy tenant costs PostgreSQL one
-- call per lease instead of one per request. A lease is a hold (kind 'lease') whose amount
-- shrinks as the requests admitted under it settle; `tenants.held_micros` is still the sum of
-- every open hold, so no number of front doors can reserve more than the balance.
alter table holds
  add column kind text not null default 'request' check (kind in ('request', 'lease')),
  -- debits settled against this lease so far
  add column spent_micros bigint not null default 0 check (spent_micros >= 0),
  -- the door stopped admitting under it; it lives until what it still covers has settled
  add column closing boolean not null default false;

-- Opens a lease of p_amount micros for one key, only while the tenant and the key are rich
-- relative to it (available ≥ p_amount × p_richness): near exhaustion every request is admitted on
-- its own (catraca_admit), so leases held by other front doors can never make a request fail that
-- the balance could pay. Keys with a request rate limit are never leased (their count lives in
-- the key row). Same lock order as every function here: the key, then the tenant.
create function catraca_lease_open(p_lease text, p_tenant text, p_key text, p_amount bigint, p_richness integer, p_ttl_ms bigint)
returns table (status text, held bigint, available bigint)
language plpgsql as $$
declare
  k api_keys%rowtype;
  v_avail bigint;
  v_key_avail bigint;
  v_win timestamptz;
begin
  select * into k from api_keys where id = p_key for update;
  if not found or k.revoked_at is not null then
    return query select 'key_revoked'::text, 0::bigint, 0::bigint; return;
  end if;
  if k.rate_limit_requests is not null or k.tenant_id <> p_tenant then
    return query select 'per_request'::text, 0::bigint, 0::bigint; return;
  end if;
  select t.balance_micros - t.held_micros into v_avail from tenants t where t.id = p_tenant for update;
  if k.limit_micros is not null then
    v_win := catraca_window_start(k.limit_reset, now());
    v_key_avail := k.limit_micros - k.held_micros - case
      when k.limit_reset is null then k.usage_micros
      when k.window_start = v_win then k.window_usage_micros
      else 0 end;
  end if;
  if v_avail < p_amount * p_richness or (v_key_avail is not null and v_key_avail < p_amount * p_richness) then
    return query select 'per_request'::text, 0::bigint, least(v_avail, coalesce(v_key_avail, v_avail)); return;
  end if;
  update tenants set held_micros = held_micros + p_amount where id = p_tenant;
  update api_keys set held_micros = held_micros + p_amount, last_used_at = now() where id = p_key;
  insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at, kind)
    values (p_lease, p_tenant, p_key, p_amount, now() + make_interval(secs => p_ttl_ms / 1000.0), 'lease');
  return query select 'ok'::text, p_amount, least(v_avail, coalesce(v_key_avail, v_avail));
end $$;

-- Closes a lease: the door admits nothing more under it and says how much, at most, all the
-- requests it admitted under it can debit in total (their worst cases, less what the door saw
-- them cost). The lease keeps covering exactly what may still settle; the rest returns to the
-- balance now.
create function catraca_lease_close(p_lease text, p_max_total bigint)
returns bigint
language plpgsql as $$
declare
  h holds%rowtype;
  v_keep bigint;
  v_release bigint;
begin
  select * into h from holds where request_id = p_lease and kind = 'lease';
  if not found then return 0; end if;
  perform 1 from api_keys where id = h.key_id for update;
  perform 1 from tenants where id = h.tenant_id for update;
  select * into h from holds where request_id = p_lease for update;
  if not found then return 0; end if;
  v_keep := greatest(0, least(h.amount_micros, p_max_total - h.spent_micros));
  v_release := h.amount_micros - v_keep;
  if v_keep = 0 then
    delete from holds where request_id = p_lease;
  else
    update holds set amount_micros = v_keep, closing = true where request_id = p_lease;
  end if;
  update tenants set held_micros = held_micros - v_release where id = h.tenant_id;
  update api_keys set held_micros = held_micros - v_release where id = h.key_id;
  return v_release;
end $$;

-- Settlement against the hold the request was admitted under: its own hold (deleted) or its
-- door's lease (reduced by the cost; a closing lease with nothing left is deleted). A hold of
-- another tenant or key is never touched. Otherwise as before: exactly once per request id,
-- never below zero (a shortfall is recorded).
drop function catraca_settle_batch(jsonb);
drop function catraca_settle(text, text, text, bigint, text, integer, integer, boolean, text, timestamptz);

create function catraca_settle(
  p_request_id text, p_tenant text, p_key text, p_cost bigint, p_model text,
  p_input integer, p_output integer, p_estimated boolean, p_outcome text, p_at timestamptz, p_hold text)
returns table (status text, debited bigint, balance bigint)
language plpgsql as $$
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
                      input_tokens, output_tokens, cost_micros, estimated, outcome, note, created_at)
    values (p_tenant, 'debit', v_debit, v_balance, 'request', p_request_id, p_key, p_model,
            p_input, p_output, p_cost, p_estimated, p_outcome,
            case when v_debit < p_cost then 'shortfall: cost exceeded the available balance' end, p_at);
  return query select 'settled'::text, v_debit, v_balance;
end $$;

create function catraca_settle_batch(p_items jsonb)
returns table (request_id text, status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  item record;
begin
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  perform 1 from tenants where id in (select distinct x.tenant_id from jsonb_to_recordset(p_items) as x(tenant_id text)) order by id for update;
  for item in
    select x.*
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, cost text, model text,
                      input integer, output integer, estimated boolean, outcome text, at timestamptz, hold text))
           with ordinality as x(request_id, tenant_id, key_id, cost, model, input, output, estimated, outcome, at, hold, ord)
     order by x.ord
  loop
    return query select item.request_id, s.status, s.debited, s.balance
      from catraca_settle(item.request_id, item.tenant_id, item.key_id, item.cost::bigint, item.model,
                          item.input, item.output, item.estimated, item.outcome, item.at, item.hold) s;
  end loop;
end $$;
