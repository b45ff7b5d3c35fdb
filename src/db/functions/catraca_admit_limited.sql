-- Admission of a key with finer limits (max_concurrent, tpm, end_user_daily_limit), one request at
-- a time: the key row is locked first (the global lock order: keys, then tenants), its limits are
-- checked, then catraca_admit reserves the money in the same transaction. Refusals:
--   concurrency_limited  as many requests of the key in flight as max_concurrent (rl_reset_ms: 1 s)
--   tpm_limited          this minute's tokens plus p_tokens above tpm (rl_reset_ms: to the next minute)
--   end_user_limit       the end user's debits today (UTC) plus what its requests in flight hold plus
--                        p_max above end_user_daily_limit (available: what is left of it)
create or replace function catraca_admit_limited(
  p_request_id text, p_tenant text, p_key text, p_min bigint, p_max bigint, p_ttl_ms bigint, p_tokens bigint, p_end_user text)
returns table (status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  k api_keys%rowtype;
  v_minute timestamptz := date_trunc('minute', clock_timestamp());
  v_used bigint;
  v_spent bigint;
  r record;
begin
  select * into k from api_keys where id = p_key for update;
  if not found or k.revoked_at is not null then
    return query select 'key_revoked'::text, 0::bigint, 0::bigint, null::integer, null::integer, null::bigint; return;
  end if;
  if k.max_concurrent is not null
     and (select count(*) from holds h where h.key_id = p_key and h.kind = 'request') >= k.max_concurrent then
    return query select 'concurrency_limited'::text, 0::bigint, 0::bigint, k.max_concurrent, 0, 1000::bigint; return;
  end if;
  v_used := case when k.tpm_window_start = v_minute then k.tpm_window_tokens else 0 end;
  if k.tpm is not null and v_used + p_tokens > k.tpm then
    return query select 'tpm_limited'::text, 0::bigint, 0::bigint, k.tpm, greatest(k.tpm - v_used, 0)::integer,
      ceil(extract(epoch from (v_minute + interval '1 minute' - clock_timestamp())) * 1000)::bigint; return;
  end if;
  if k.end_user_daily_limit is not null and p_end_user is not null then
    v_spent := coalesce((select sum(l.amount_micros) from ledger l
                          where l.tenant_id = p_tenant and l.end_user = p_end_user and l.key_id = p_key and l.kind = 'debit'
                            and l.created_at >= date_trunc('day', now() at time zone 'UTC') at time zone 'UTC'), 0)
             + coalesce((select sum(h.amount_micros) from holds h where h.key_id = p_key and h.end_user = p_end_user), 0);
    if v_spent + p_max > k.end_user_daily_limit then
      return query select 'end_user_limit'::text, 0::bigint, greatest(k.end_user_daily_limit - v_spent, 0), null::integer, null::integer, null::bigint; return;
    end if;
  end if;
  select * into r from catraca_admit(p_request_id, p_tenant, p_key, p_min, p_max, p_ttl_ms);
  if r.status = 'ok' then
    if k.tpm is not null then
      update api_keys set tpm_window_start = v_minute, tpm_window_tokens = v_used + p_tokens where id = p_key;
    end if;
    if p_end_user is not null then update holds set end_user = p_end_user where holds.request_id = p_request_id; end if;
  end if;
  return query select r.status, r.held, r.available, r.rl_limit, r.rl_remaining, r.rl_reset_ms;
end $$;
revoke all on function catraca_admit_limited(text, text, text, bigint, bigint, bigint, bigint, text) from public;
grant execute on function catraca_admit_limited(text, text, text, bigint, bigint, bigint, bigint, text) to catraca_gateway;
