-- The reconciling sweep of the metering-path notifications (src/notify/settled.ts; metering's
-- sweeper calls it every HOLD_SWEEP_INTERVAL_MS). Metering checks the tenants and keys a settlement
-- debited right after its commit, from ids held in memory; a crash then loses that check, and a
-- tenant left depleted or a key left at its limit gets no further settlement to trigger another.
-- This walks the next p_limit tenants (by primary key) and the next p_limit limited keys (index
-- api_keys_limited) after the cursor of notify_reconcile, wrapping around at the end, and runs
-- catraca_notify_balance / catraca_notify_keys for those whose notification state disagrees:
--   a tenant below R$ 0,01 not marked depleted_fired, or below its threshold not marked low_fired,
--     that a request debited within the last day (a tenant never used, e.g. a new sign-up at R$ 0,
--     was never "depleted"); or marked fired while its balance is back above (re-arming);
--   a key used within the last day whose spend in its window leaves less than R$ 0,01 of its limit,
--     without the window's key.limit_reached event (a lifetime limit's event, once gone with the
--     retention, is not made again for a key long unused).
-- Bounded work per call (2 × p_limit rows read by index, plus the checks). One caller at a time
-- (the cursor's row, skip locked: another caller returns at once). Returns the events it made.
create or replace function catraca_notify_reconcile(p_limit integer)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
declare
  r notify_reconcile%rowtype;
  v_dust constant bigint := 10000;
  v_tenants text[];
  v_keys text[];
  v_last_tenant text;
  v_last_key text;
  v_n_tenants integer;
  v_n_keys integer;
begin
  select * into r from notify_reconcile where id for update skip locked;
  if not found then return; end if;

  select max(p.id), count(*)::int,
         coalesce(array_agg(p.id order by p.id) filter (where
           (p.balance_micros < v_dust and not coalesce(n.depleted_fired, false)
             or p.balance_micros < n.low_balance_micros and not n.low_fired)
           and exists (select 1 from ledger l
                        where l.tenant_id = p.id and l.created_at > now() - interval '1 day' and l.kind = 'debit' and l.source = 'request')
           or n.depleted_fired and p.balance_micros >= v_dust
           or n.low_fired and (n.low_balance_micros is null or p.balance_micros >= n.low_balance_micros)), '{}')
    into v_last_tenant, v_n_tenants, v_tenants
    from (select t.id, t.balance_micros from tenants t where t.id > r.tenant_after order by t.id limit p_limit) p
    left join notify_tenants n on n.tenant_id = p.id;

  select max(p.id), count(*)::int,
         coalesce(array_agg(p.id order by p.id) filter (where
           p.last_used_at > now() - interval '1 day' and p.limit_micros - p.spent < v_dust
           and not exists (select 1 from notify_events e
                            where e.dedup_key = 'key.limit_reached:' || p.id || ':' || coalesce(extract(epoch from p.start)::bigint::text, 'total'))), '{}')
    into v_last_key, v_n_keys, v_keys
    from (select k.id, k.limit_micros, k.last_used_at, ws.start,
                 case when k.limit_reset is null then k.usage_micros
                      when k.window_start = ws.start then k.window_usage_micros
                      else 0 end as spent
            from api_keys k,
                 lateral (select case when k.limit_reset is null then null else catraca_window_start(k.limit_reset, now()) end as start) ws
           where k.limit_micros is not null and k.revoked_at is null and k.id > r.key_after
           order by k.id limit p_limit) p;

  update notify_reconcile
     set tenant_after = case when v_n_tenants < p_limit then '' else v_last_tenant end,
         key_after = case when v_n_keys < p_limit then '' else v_last_key end,
         updated_at = now()
   where id;
  return query select * from catraca_notify_balance(v_tenants);
  return query select * from catraca_notify_keys(v_keys);
end $$;
revoke all on function catraca_notify_reconcile(integer) from public;
grant execute on function catraca_notify_reconcile(integer) to catraca_metering;
