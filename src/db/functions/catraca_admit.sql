-- Admission: reserve between p_min and p_max micros against the tenant's available balance
-- (balance - holds), the key's remaining limit and the key's request rate limit (fixed windows
-- aligned to multiples of the interval since the epoch), atomically. A suspended tenant is refused
-- ('tenant_suspended'). Rows are locked key first,
-- then tenant.
--
-- Global lock order for every function that touches several accounts: all key rows (sorted by
-- id), then all tenant rows (sorted by id). Single-row admissions/settlements (one key, then its
-- tenant) follow it trivially, so no two catraca transactions can deadlock.
create or replace function catraca_admit(p_request_id text, p_tenant text, p_key text, p_min bigint, p_max bigint, p_ttl_ms bigint)
returns table (status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  k api_keys%rowtype;
  v_balance_avail bigint;
  v_key_avail bigint;
  v_win timestamptz;
  v_amount bigint;
  v_rl_start timestamptz;
  v_rl_count integer;
  v_rl_reset bigint;
  v_suspended boolean;
begin
  select * into k from api_keys where id = p_key for update;
  if not found or k.revoked_at is not null then
    return query select 'key_revoked'::text, 0::bigint, 0::bigint, null::integer, null::integer, null::bigint; return;
  end if;

  if k.rate_limit_requests is not null and k.rate_limit_interval_s is not null then
    v_rl_start := to_timestamp(floor(extract(epoch from clock_timestamp()) / k.rate_limit_interval_s) * k.rate_limit_interval_s);
    v_rl_count := case when k.rl_window_start = v_rl_start then k.rl_count else 0 end;
    v_rl_reset := ceil(extract(epoch from (v_rl_start + make_interval(secs => k.rate_limit_interval_s) - clock_timestamp())) * 1000)::bigint;
    if v_rl_count >= k.rate_limit_requests then
      return query select 'rate_limited'::text, 0::bigint, 0::bigint, k.rate_limit_requests, 0, v_rl_reset; return;
    end if;
    v_rl_count := v_rl_count + 1;
    update api_keys set rl_window_start = v_rl_start, rl_count = v_rl_count where id = p_key;
  end if;

  select t.balance_micros - t.held_micros, t.suspended_at is not null into v_balance_avail, v_suspended from tenants t where t.id = p_tenant for update;
  if v_suspended then
    return query select 'tenant_suspended'::text, 0::bigint, 0::bigint, k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset; return;
  end if;
  if k.limit_micros is not null then
    v_win := catraca_window_start(k.limit_reset, now());
    v_key_avail := k.limit_micros - k.held_micros - case
      when k.limit_reset is null then k.usage_micros
      when k.window_start = v_win then k.window_usage_micros
      else 0 end;
    if v_key_avail < p_min and v_key_avail < v_balance_avail then
      return query select 'key_limit'::text, 0::bigint, greatest(v_key_avail, 0), k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset; return;
    end if;
  end if;
  if v_balance_avail < p_min then
    return query select 'insufficient_balance'::text, 0::bigint, v_balance_avail, k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset; return;
  end if;
  v_amount := least(p_max, v_balance_avail, coalesce(v_key_avail, p_max));
  update tenants set held_micros = held_micros + v_amount where id = p_tenant;
  update api_keys set held_micros = held_micros + v_amount, last_used_at = now() where id = p_key;
  insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at)
    values (p_request_id, p_tenant, p_key, v_amount, now() + make_interval(secs => p_ttl_ms / 1000.0));
  return query select 'ok'::text, v_amount, least(v_balance_avail, coalesce(v_key_avail, v_balance_avail)),
    k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset;
end $$;
revoke all on function catraca_admit(text, text, text, bigint, bigint, bigint) from public;
grant execute on function catraca_admit(text, text, text, bigint, bigint, bigint) to catraca_gateway;
