-- Many admissions of one tenant in one transaction (the front door coalesces the requests of a
-- hot tenant that arrive while its previous admission call is in flight). Lock order stays
-- "keys before tenant": every key of the batch first, in sorted order, then catraca_admit per item
-- re-enters locks this transaction already holds. Results come back in the items' order.
create function catraca_admit_batch(p_items jsonb, p_ttl_ms bigint)
returns table (request_id text, status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql as $$
declare
  item record;
begin
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  for item in
    select x.request_id, x.tenant_id, x.key_id, x.min::bigint as min, x.max::bigint as max, x.ord
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, min text, max text))
           with ordinality as x(request_id, tenant_id, key_id, min, max, ord)
     order by x.ord
  loop
    return query select item.request_id, a.status, a.held, a.available, a.rl_limit, a.rl_remaining, a.rl_reset_ms
      from catraca_admit(item.request_id, item.tenant_id, item.key_id, item.min, item.max, p_ttl_ms) a;
  end loop;
end $$;
