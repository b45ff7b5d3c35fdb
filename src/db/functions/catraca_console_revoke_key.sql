-- An operator revokes a tenant's key from the console: the revocation, its key.revoked event
-- (catraca_notify_key_revoked: the tenant's webhooks and e-mails hear of it) and the audit row in
-- one transaction. The key must be the tenant's ('unknown' otherwise: another tenant's key id under
-- this tenant's page is not found); a revoked key stays as it was ('already'). The console then
-- tells every front door on NATS; the event is published by the notifier's relay.
create or replace function catraca_console_revoke_key(p_operator text, p_ip text, p_tenant text, p_key text)
returns table (status text, revoked_at timestamptz)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_revoked timestamptz;
begin
  if not exists (select 1 from operators where id = p_operator and disabled_at is null) then
    return query select 'unknown_operator'::text, null::timestamptz; return;
  end if;
  select k.revoked_at into v_revoked from api_keys k where k.id = p_key and k.tenant_id = p_tenant for update;
  if not found then
    return query select 'unknown'::text, null::timestamptz; return;
  end if;
  if v_revoked is not null then
    return query select 'already'::text, v_revoked; return;
  end if;
  update api_keys k set revoked_at = now() where k.id = p_key and k.tenant_id = p_tenant returning k.revoked_at into v_revoked;
  perform catraca_notify_key_revoked(p_key);
  perform catraca_console_audit(p_operator, null, 'key_revoke', p_ip, p_tenant, p_key, null,
                                jsonb_build_object('revoked_at', null), jsonb_build_object('revoked_at', v_revoked));
  return query select 'revoked'::text, v_revoked;
end $$;
revoke all on function catraca_console_revoke_key(text, text, text, text) from public;
grant execute on function catraca_console_revoke_key(text, text, text, text) to catraca_console;
