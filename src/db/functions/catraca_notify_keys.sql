-- key.limit_reached for these keys (src/notify): metering calls it after each settlement commit with
-- the keys it debited. A key with a BRL limit has reached it when what it spent in its current window
-- (catraca_window_start; the whole life of a key without a reset) leaves less than R$ 0,01 of the
-- limit: admission refuses it from then on. Once per key and window (dedup_key). Returns the events
-- it made.
create or replace function catraca_notify_keys(p_keys text[])
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
begin
  return query
  select e.*
    from (select k.tenant_id,
                 jsonb_build_object('tenant_id', k.tenant_id, 'key_id', k.id, 'key_label', k.label, 'key_hint', k.key_hint,
                                    'limit', (k.limit_micros / 1000000)::text || '.' || lpad((k.limit_micros % 1000000)::text, 6, '0'),
                                    'limit_reset', k.limit_reset,
                                    'window_start', case when k.limit_reset is null then null else to_jsonb(w.start) end,
                                    'spent', (w.spent / 1000000)::text || '.' || lpad((w.spent % 1000000)::text, 6, '0')) as data,
                 'key.limit_reached:' || k.id || ':' || coalesce(extract(epoch from w.start)::bigint::text, 'total') as dedup_key
            from api_keys k,
                 lateral (select case when k.limit_reset is null then null else catraca_window_start(k.limit_reset, now()) end as start) ws,
                 lateral (select ws.start,
                                 case when k.limit_reset is null then k.usage_micros
                                      when k.window_start = ws.start then k.window_usage_micros
                                      else 0 end as spent) w
           where k.id = any(p_keys) and k.limit_micros is not null and k.revoked_at is null
             and k.limit_micros - w.spent < 10000
           order by k.id) k,
         lateral catraca_notify_event(k.tenant_id, 'key.limit_reached', k.data, k.dedup_key) e;
end $$;
revoke all on function catraca_notify_keys(text[]) from public;
grant execute on function catraca_notify_keys(text[]) to catraca_metering;
