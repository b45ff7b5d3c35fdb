-- Many admissions of one tenant in one transaction (the front door coalesces the requests of a
-- hot tenant that arrive while its previous admission call is in flight): the same rules as
-- catraca_admit item by item, the same result rows, in the items' order, at less PostgreSQL CPU
-- per request than calling catraca_admit per item:
--  * the items are read from the jsonb once, into arrays (with the batch's keys, sorted);
--  * each account is locked and read by one primary-key probe per account (a batch has one tenant
--    and one or two keys), not by `id = any(array)`: a generic plan assumes 10 elements and, with
--    1 000 tenants, scans the whole tenants table;
--  * the per-item rules run on arrays, with no SQL in the item loop: first what depends on the key
--    alone (revoked, request rate limit, whose count advances even for a request the balance then
--    refuses), then, the tenants of the requests still standing locked, key limit and balance;
--  * each key and tenant is then written once, and the holds inserted in one statement.
-- Lock order: keys sorted, then tenants sorted. A tenant is locked only when one of its requests
-- got past its key. An unknown tenant fails the whole batch on the holds' foreign key, as
-- catraca_admit does.
create or replace function catraca_admit_batch(p_items jsonb, p_ttl_ms bigint)
returns table (request_id text, status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql
-- Custom plans (the default for the first calls) see 1-element arrays, so every generic plan looks
-- dearer than them and each call would be planned again.
set plan_cache_mode = force_generic_plan
security definer
set search_path = public, pg_temp
as $$
declare
  n integer;
  r_req text[]; r_tenant text[]; r_key text[]; r_min bigint[]; r_max bigint[];
  k_ids text[]; k_revoked boolean[]; k_limit bigint[]; k_reset text[]; k_held bigint[]; k_usage bigint[]; k_win timestamptz[];
  k_winuse bigint[]; k_rl_req integer[]; k_rl_int integer[]; k_rl_start timestamptz[]; k_rl_count integer[];
  k_rl_set boolean[]; k_used boolean[];
  t_ids text[]; t_avail bigint[]; t_add bigint[]; t_used boolean[]; t_susp boolean[];
  -- per item: its result
  o_status text[]; o_held bigint[]; o_avail bigint[]; o_rl_limit integer[]; o_rl_rem integer[]; o_rl_reset bigint[];
  standing text[];
  k_sorted text[];
  k api_keys%rowtype; t tenants%rowtype; v_id text;
  i integer; ki integer; ti integer;
  v_balance_avail bigint; v_key_avail bigint; v_win timestamptz; v_amount bigint;
  v_rl_start timestamptz; v_rl_count integer; v_rl_reset bigint;
begin
  select count(*)::integer, array_agg(x.request_id), array_agg(x.tenant_id), array_agg(x.key_id), array_agg(x.min::bigint), array_agg(x.max::bigint)
         , array_agg(distinct x.key_id order by x.key_id) filter (where x.key_id is not null)
    into n, r_req, r_tenant, r_key, r_min, r_max, k_sorted
    from (select *
            from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, min text, max text))
                 with ordinality as j(request_id, tenant_id, key_id, min, max, ord)
           order by j.ord) x;
  if n = 0 then return; end if;

  -- lock order of every catraca function: keys (sorted), then tenants (sorted)
  foreach v_id in array coalesce(k_sorted, '{}') loop
    select * into k from api_keys where id = v_id for update;
    if found then
      k_ids := k_ids || k.id; k_revoked := k_revoked || (k.revoked_at is not null); k_limit := k_limit || k.limit_micros;
      k_reset := k_reset || k.limit_reset; k_held := k_held || k.held_micros; k_usage := k_usage || k.usage_micros;
      k_win := k_win || k.window_start; k_winuse := k_winuse || k.window_usage_micros; k_rl_req := k_rl_req || k.rate_limit_requests;
      k_rl_int := k_rl_int || k.rate_limit_interval_s; k_rl_start := k_rl_start || k.rl_window_start; k_rl_count := k_rl_count || k.rl_count;
      k_rl_set := k_rl_set || false; k_used := k_used || false;
    end if;
  end loop;

  o_status := array_fill(null::text, array[n]); o_held := array_fill(0::bigint, array[n]); o_avail := array_fill(0::bigint, array[n]);
  o_rl_limit := array_fill(null::integer, array[n]); o_rl_rem := array_fill(null::integer, array[n]);
  o_rl_reset := array_fill(null::bigint, array[n]);
  standing := '{}';

  -- what depends on the key alone: revoked, request rate limit
  for i in 1 .. n loop
    ki := array_position(k_ids, r_key[i]);
    if ki is null or k_revoked[ki] then
      o_status[i] := 'key_revoked';
      continue;
    end if;
    o_rl_limit[i] := k_rl_req[ki];
    if k_rl_req[ki] is not null and k_rl_int[ki] is not null then
      v_rl_start := to_timestamp(floor(extract(epoch from clock_timestamp()) / k_rl_int[ki]) * k_rl_int[ki]);
      v_rl_count := case when k_rl_start[ki] = v_rl_start then k_rl_count[ki] else 0 end;
      v_rl_reset := ceil(extract(epoch from (v_rl_start + make_interval(secs => k_rl_int[ki]) - clock_timestamp())) * 1000)::bigint;
      o_rl_reset[i] := v_rl_reset;
      if v_rl_count >= k_rl_req[ki] then
        o_status[i] := 'rate_limited'; o_rl_rem[i] := 0;
        continue;
      end if;
      v_rl_count := v_rl_count + 1;
      k_rl_start[ki] := v_rl_start; k_rl_count[ki] := v_rl_count; k_rl_set[ki] := true;
      o_rl_rem[i] := k_rl_req[ki] - v_rl_count;
    end if;
    standing := standing || r_tenant[i];
  end loop;

  foreach v_id in array array(select distinct x from unnest(standing) as x order by x) loop
    select * into t from tenants where id = v_id for update;
    if found then
      t_ids := t_ids || t.id; t_avail := t_avail || (t.balance_micros - t.held_micros); t_add := t_add || 0::bigint; t_used := t_used || false;
      t_susp := t_susp || (t.suspended_at is not null);
    end if;
  end loop;

  -- key limit and balance, item by item against what the items before it reserved
  for i in 1 .. n loop
    if o_status[i] is not null then continue; end if;
    ki := array_position(k_ids, r_key[i]);
    ti := array_position(t_ids, r_tenant[i]);
    v_balance_avail := t_avail[ti]; -- null for an unknown tenant: admitted, then refused by the holds' foreign key
    if ti is not null and t_susp[ti] then
      o_status[i] := 'tenant_suspended';
      continue;
    end if;
    v_key_avail := null;
    if k_limit[ki] is not null then
      v_win := catraca_window_start(k_reset[ki], now());
      v_key_avail := k_limit[ki] - k_held[ki] - case
        when k_reset[ki] is null then k_usage[ki]
        when k_win[ki] = v_win then k_winuse[ki]
        else 0 end;
      if v_key_avail < r_min[i] and v_key_avail < v_balance_avail then
        o_status[i] := 'key_limit'; o_avail[i] := greatest(v_key_avail, 0);
        continue;
      end if;
    end if;
    if v_balance_avail < r_min[i] then
      o_status[i] := 'insufficient_balance'; o_avail[i] := v_balance_avail;
      continue;
    end if;
    v_amount := least(r_max[i], v_balance_avail, coalesce(v_key_avail, r_max[i]));
    if ti is not null then
      t_avail[ti] := t_avail[ti] - v_amount; t_add[ti] := t_add[ti] + v_amount; t_used[ti] := true;
    end if;
    k_held[ki] := k_held[ki] + v_amount; k_used[ki] := true;
    o_status[i] := 'ok'; o_held[i] := v_amount; o_avail[i] := least(v_balance_avail, coalesce(v_key_avail, v_balance_avail));
  end loop;

  for ki in 1 .. coalesce(cardinality(k_ids), 0) loop
    if k_rl_set[ki] or k_used[ki] then
      update api_keys set held_micros = k_held[ki], rl_window_start = k_rl_start[ki], rl_count = k_rl_count[ki],
                          last_used_at = case when k_used[ki] then now() else last_used_at end
       where id = k_ids[ki];
    end if;
  end loop;
  for ti in 1 .. coalesce(cardinality(t_ids), 0) loop
    if t_used[ti] then
      update tenants set held_micros = held_micros + t_add[ti] where id = t_ids[ti];
    end if;
  end loop;
  if 'ok' = any(o_status) then
    insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at)
      select v.req, v.tenant, v.key, v.held, now() + make_interval(secs => p_ttl_ms / 1000.0)
        from unnest(r_req, r_tenant, r_key, o_held, o_status) with ordinality as v(req, tenant, key, held, status, ord)
       where v.status = 'ok'
       order by v.ord;
  end if;
  return query select v.req, v.status, v.held, v.avail, v.rl_limit, v.rl_rem, v.rl_reset
    from unnest(r_req, o_status, o_held, o_avail, o_rl_limit, o_rl_rem, o_rl_reset) with ordinality as v(req, status, held, avail, rl_limit, rl_rem, rl_reset, ord)
   order by v.ord;
end $$;
revoke all on function catraca_admit_batch(jsonb, bigint) from public;
grant execute on function catraca_admit_batch(jsonb, bigint) to catraca_gateway;
