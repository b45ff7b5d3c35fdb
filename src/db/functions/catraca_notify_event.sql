-- One notification event (src/notify), for the catraca_notify_* functions that make them (it runs as
-- the owner, called by them; no process calls it): a new msg_ id, the tenant, the type and its
-- data, and the dedup_key that makes it once only (none: every call makes one). Returns the event
-- made, or nothing when its dedup_key was made already.
create or replace function catraca_notify_event(p_tenant text, p_type text, p_data jsonb, p_dedup_key text default null)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
as $$
begin
  return query
  insert into notify_events (id, tenant_id, type, data, dedup_key)
  values ('msg_' || replace(gen_random_uuid()::text, '-', ''), p_tenant, p_type, p_data, p_dedup_key)
  on conflict (dedup_key) do nothing
  returning *;
end $$;
revoke all on function catraca_notify_event(text, text, jsonb, text) from public;
