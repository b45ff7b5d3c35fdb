-- key.expiring (src/notify): the dispatcher's periodic scan. A key not revoked whose expires_at is
-- within the next 7 days, and that was made to live longer than 7 days (a key made to last a day is
-- not announced at birth), once per key (dedup_key); at most p_limit keys a call, soonest first.
-- Returns the events made.
create or replace function catraca_notify_expiring(p_limit integer)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
begin
  return query
  select e.*
    from (select k.* from api_keys k
           where k.expires_at is not null and k.revoked_at is null
             and k.expires_at > now() and k.expires_at <= now() + interval '7 days'
             and k.expires_at - k.created_at > interval '7 days'
             and not exists (select 1 from notify_events e where e.dedup_key = 'key.expiring:' || k.id)
           order by k.expires_at
           limit p_limit) k,
         lateral catraca_notify_event(k.tenant_id, 'key.expiring',
                                      jsonb_build_object('tenant_id', k.tenant_id, 'key_id', k.id, 'key_label', k.label, 'key_hint', k.key_hint,
                                                         'expires_at', k.expires_at),
                                      'key.expiring:' || k.id) e;
end $$;
revoke all on function catraca_notify_expiring(integer) from public;
grant execute on function catraca_notify_expiring(integer) to catraca_portal;
