-- key.revoked for a key just revoked (src/notify): the portal and the CLI call it after revoking.
-- Once per key (dedup_key), and only within a day of the revocation (a repeated `key revoke` long
-- after, once the event itself is gone with the retention, announces nothing). Returns the event made.
create or replace function catraca_notify_key_revoked(p_key text)
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
           where k.id = p_key and k.revoked_at is not null and k.revoked_at > now() - interval '1 day') k,
         lateral catraca_notify_event(k.tenant_id, 'key.revoked',
                                      jsonb_build_object('tenant_id', k.tenant_id, 'key_id', k.id, 'key_label', k.label, 'key_hint', k.key_hint,
                                                         'revoked_at', k.revoked_at),
                                      'key.revoked:' || k.id) e;
end $$;
revoke all on function catraca_notify_key_revoked(text) from public;
grant execute on function catraca_notify_key_revoked(text) to catraca_portal, catraca_admin;
