-- The balance events of these tenants (src/notify): called after their balance changed — by metering
-- after each settlement commit, by the portal after a Pix credit or refund and when the threshold is
-- saved, by the CLI after a grant. Level-triggered on durable state, so each crossing fires once
-- whoever calls, however often, and a missed call is made good by the next one:
--   balance.low       balance_micros < the tenant's threshold, and not fired since it was last at or
--                     above it (low_fired); fires, sets low_fired. At or above the threshold again
--                     (a top-up, a grant, a lowered threshold) clears low_fired: the next crossing fires.
--   balance.depleted  balance_micros < R$ 0,01 (10 000 µBRL), likewise with depleted_fired.
-- A first cheap read picks the tenants with something to do (none, mostly); for each, its
-- notify_tenants row is locked first and the balance read after, so a credit committed meanwhile is
-- seen (never an event for a balance that is no longer so). Tenants in id order: no deadlock between
-- callers. Returns the events it made (the caller publishes them; else the dispatcher's relay does).
-- An event's `balance` is what the debit that crossed left, not the balance now: metering checks up
-- to 250 ms after the commit (CHECK_EVERY_MS), its sweep later still, and debits that settled
-- meanwhile are not the crossing. The crossing is the tenant's latest ledger debit from at or above
-- the line to below it, found newest first through ledger_tenant_time (reading the rows since the
-- crossing: a few, as the check follows it closely); where there is none (a tenant below the line
-- without ever being debited across it, e.g. a sign-up at R$ 0,00), the balance now.
create or replace function catraca_notify_balance(p_tenants text[])
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  c record;
  s notify_tenants%rowtype;
  v_balance bigint;
  v_left bigint;
  v_dust constant bigint := 10000;
begin
  for c in
    select t.id from tenants t left join notify_tenants n on n.tenant_id = t.id
     where t.id = any(p_tenants)
       and (t.balance_micros < v_dust and not coalesce(n.depleted_fired, false)
         or n.depleted_fired and t.balance_micros >= v_dust
         or t.balance_micros < n.low_balance_micros and not n.low_fired
         or n.low_fired and (n.low_balance_micros is null or t.balance_micros >= n.low_balance_micros))
     order by t.id
  loop
    insert into notify_tenants (tenant_id) values (c.id) on conflict (tenant_id) do nothing;
    select * into s from notify_tenants where tenant_id = c.id for update;
    select balance_micros into v_balance from tenants where id = c.id;
    if s.low_balance_micros is not null and v_balance < s.low_balance_micros and not s.low_fired then
      update notify_tenants set low_fired = true where tenant_id = c.id;
      v_left := coalesce((select l.balance_after_micros from ledger l
                           where l.tenant_id = c.id and l.kind = 'debit' and l.balance_after_micros < s.low_balance_micros
                             and l.balance_after_micros + l.amount_micros >= s.low_balance_micros
                           order by l.created_at desc, l.id desc limit 1), v_balance);
      return query select * from catraca_notify_event(c.id, 'balance.low',
        jsonb_build_object('tenant_id', c.id,
                           'balance', (v_left / 1000000)::text || '.' || lpad((v_left % 1000000)::text, 6, '0'),
                           'threshold', (s.low_balance_micros / 1000000)::text || '.' || lpad((s.low_balance_micros % 1000000)::text, 6, '0')));
    elsif s.low_fired and (s.low_balance_micros is null or v_balance >= s.low_balance_micros) then
      update notify_tenants set low_fired = false where tenant_id = c.id;
    end if;
    if v_balance < v_dust and not s.depleted_fired then
      update notify_tenants set depleted_fired = true where tenant_id = c.id;
      v_left := coalesce((select l.balance_after_micros from ledger l
                           where l.tenant_id = c.id and l.kind = 'debit' and l.balance_after_micros < v_dust
                             and l.balance_after_micros + l.amount_micros >= v_dust
                           order by l.created_at desc, l.id desc limit 1), v_balance);
      return query select * from catraca_notify_event(c.id, 'balance.depleted',
        jsonb_build_object('tenant_id', c.id,
                           'balance', (v_left / 1000000)::text || '.' || lpad((v_left % 1000000)::text, 6, '0'),
                           'depleted_below', '0.010000'));
    elsif s.depleted_fired and v_balance >= v_dust then
      update notify_tenants set depleted_fired = false where tenant_id = c.id;
    end if;
  end loop;
end $$;
revoke all on function catraca_notify_balance(text[]) from public;
grant execute on function catraca_notify_balance(text[]) to catraca_metering, catraca_portal, catraca_admin;
