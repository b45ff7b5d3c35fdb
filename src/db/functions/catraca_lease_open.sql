-- Admission leases: a front door reserves a slice of a tenant's (and key's) balance in one
-- row-locked call and admits requests from it in memory. A lease is a hold (kind 'lease') whose
-- amount shrinks as the requests admitted under it settle; `tenants.held_micros` is still the sum
-- of every open hold, so no number of front doors can reserve more than the balance.
--
-- Opens a lease of p_amount micros for one key, only while the tenant and the key are rich
-- relative to it (available ≥ p_amount × p_richness): near exhaustion every request is admitted on
-- its own (catraca_admit), so leases held by other front doors can never make a request fail that
-- the balance could pay. Keys with a request rate limit are never leased (their count lives in
-- the key row). Locks the key, then the tenant.
create or replace function catraca_lease_open(p_lease text, p_tenant text, p_key text, p_amount bigint, p_richness integer, p_ttl_ms bigint)
returns table (status text, held bigint, available bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_suspended boolean;
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
  select t.balance_micros - t.held_micros, t.suspended_at is not null into v_avail, v_suspended from tenants t where t.id = p_tenant for update;
  -- a suspended tenant gets no lease: its requests go one by one and are refused there
  if v_suspended then
    return query select 'per_request'::text, 0::bigint, 0::bigint; return;
  end if;
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
revoke all on function catraca_lease_open(text, text, text, bigint, integer, bigint) from public;
grant execute on function catraca_lease_open(text, text, text, bigint, integer, bigint) to catraca_gateway;
