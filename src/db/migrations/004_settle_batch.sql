-- Global lock order for every function that touches several accounts: all key rows (sorted by
-- id), then all tenant rows (sorted by id). Single-row admissions/settlements (one key, then its
-- tenant) follow it trivially, so no two catraca transactions can deadlock.

-- Settles many usage messages in one transaction: one WAL flush for the whole batch. Each item is
-- still exactly-once on its own (catraca_settle's ledger check and unique request id).
create function catraca_settle_batch(p_items jsonb)
returns table (request_id text, status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  item record;
begin
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  perform 1 from tenants where id in (select distinct x.tenant_id from jsonb_to_recordset(p_items) as x(tenant_id text)) order by id for update;
  for item in
    select x.*
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, cost text, model text,
                      input integer, output integer, estimated boolean, outcome text, at timestamptz))
           with ordinality as x(request_id, tenant_id, key_id, cost, model, input, output, estimated, outcome, at, ord)
     order by x.ord
  loop
    return query select item.request_id, s.status, s.debited, s.balance
      from catraca_settle(item.request_id, item.tenant_id, item.key_id, item.cost::bigint, item.model,
                          item.input, item.output, item.estimated, item.outcome, item.at) s;
  end loop;
end $$;

-- The sweeper in the same lock order.
create or replace function catraca_sweep_holds(p_limit integer) returns integer
language plpgsql as $$
declare
  h holds%rowtype;
  n integer := 0;
  v_ids text[];
begin
  select array_agg(request_id) into v_ids from (select request_id from holds where expires_at < now() order by expires_at limit p_limit) e;
  if v_ids is null then return 0; end if;
  perform 1 from api_keys where id in (select key_id from holds where request_id = any(v_ids)) order by id for update;
  perform 1 from tenants where id in (select tenant_id from holds where request_id = any(v_ids)) order by id for update;
  for h in delete from holds where request_id = any(v_ids) and expires_at < now() returning * loop
    update tenants set held_micros = held_micros - h.amount_micros where id = h.tenant_id;
    update api_keys set held_micros = held_micros - h.amount_micros where id = h.key_id;
    n := n + 1;
  end loop;
  return n;
end $$;
