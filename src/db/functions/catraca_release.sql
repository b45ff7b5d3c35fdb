-- Releases one hold without a debit (the job never reached a worker). Locks the key, then the
-- tenant.
create or replace function catraca_release(p_request_id text) returns bigint
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare h holds%rowtype;
begin
  select * into h from holds where request_id = p_request_id;
  if not found then return 0; end if;
  perform 1 from api_keys where id = h.key_id for update;
  perform 1 from tenants where id = h.tenant_id for update;
  delete from holds where request_id = p_request_id;
  if not found then return 0; end if;
  update tenants set held_micros = held_micros - h.amount_micros where id = h.tenant_id;
  update api_keys set held_micros = held_micros - h.amount_micros where id = h.key_id;
  return h.amount_micros;
end $$;
revoke all on function catraca_release(text) from public;
grant execute on function catraca_release(text) to catraca_gateway;
