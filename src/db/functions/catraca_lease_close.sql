-- Closes a lease: the door admits nothing more under it and says how much, at most, all the
-- requests it admitted under it can debit in total (their worst cases, less what the door saw
-- them cost). The lease keeps covering exactly what may still settle; the rest returns to the
-- balance now. Locks the key, then the tenant.
create or replace function catraca_lease_close(p_lease text, p_max_total bigint)
returns bigint
language plpgsql
security definer
set search_path = public, pg_temp
as $$
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
revoke all on function catraca_lease_close(text, bigint) from public;
grant execute on function catraca_lease_close(text, bigint) to catraca_gateway;
