-- Admission of one line of a vendor-mode batch (src/batch/vendor.ts), before its chunk goes to the
-- vendor: catraca_admit for exactly p_amount (the line's worst case at the batch prices), its hold
-- then marked kind 'batch' in the same transaction. A batch hold counts in the balance and the
-- key's limit like any hold, not in the key's max_concurrent (requests in flight at catraca:
-- catraca_admit_limited counts kind 'request'); it settles and expires as a request's hold.
create or replace function catraca_admit_vendor_line(p_request_id text, p_tenant text, p_key text, p_amount bigint, p_ttl_ms bigint)
returns table (status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  r record;
begin
  select * into r from catraca_admit(p_request_id, p_tenant, p_key, p_amount, p_amount, p_ttl_ms);
  if r.status = 'ok' then
    update holds set kind = 'batch' where holds.request_id = p_request_id;
  end if;
  return query select r.status, r.held, r.available, r.rl_limit, r.rl_remaining, r.rl_reset_ms;
end $$;
revoke all on function catraca_admit_vendor_line(text, text, text, bigint, bigint) from public;
grant execute on function catraca_admit_vendor_line(text, text, text, bigint, bigint) to catraca_gateway;
