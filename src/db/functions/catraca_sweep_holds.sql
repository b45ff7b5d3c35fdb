-- Releases holds whose request never settled (its worker died before publishing usage). Locks
-- the holds' keys (sorted), then their tenants (sorted).
create or replace function catraca_sweep_holds(p_limit integer) returns integer
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  h holds%rowtype;
  n integer := 0;
  v_ids text[];
begin
  select array_agg(request_id) into v_ids from (select request_id from holds where expires_at < now() order by expires_at limit p_limit) e;
  if v_ids is null then return 0; end if;
  perform 1 from api_keys where id in (select key_id from holds where request_id = any(v_ids)) order by id for update;
  perform 1 from tenants where id in (select tenant_id from holds where request_id = any(v_ids)) order by id for update;
  for h in delete from holds where request_id = any(v_ids) and expires_at < now() returning * loop
    update tenants set held_micros = held_micros - h.amount_micros where id = h.tenant_id;
    update api_keys set held_micros = held_micros - h.amount_micros where id = h.key_id;
    n := n + 1;
  end loop;
  return n;
end $$;
revoke all on function catraca_sweep_holds(integer) from public;
grant execute on function catraca_sweep_holds(integer) to catraca_metering;
