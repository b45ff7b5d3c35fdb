-- topup.recurring_failed (src/notify, docs/notifications.md): an attempt of a recurring top-up's
-- charge (Pix Automático cobr) was rejected or the charge ended unpaid. src/pix/recurring/service.ts
-- calls it in the transaction that records the failure. Once per charge and attempt (dedup_key).
create or replace function catraca_notify_recurring_failed(p_txid text, p_attempt integer, p_reason text, p_will_retry boolean)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
begin
  return query
  select e.*
    from (select c.tenant_id, c.txid, c.id_rec, c.amount_micros, c.due_date from pix_charges c where c.txid = p_txid and c.id_rec is not null) c,
         lateral catraca_notify_event(c.tenant_id, 'topup.recurring_failed',
                                      jsonb_build_object('tenant_id', c.tenant_id, 'charge_id', c.txid, 'recurrence_id', c.id_rec,
                                                         'amount', (c.amount_micros / 1000000)::text || '.' || lpad((c.amount_micros % 1000000)::text, 6, '0'),
                                                         'due_date', c.due_date, 'attempt', p_attempt, 'reason', left(p_reason, 400),
                                                         'will_retry', p_will_retry),
                                      'topup.recurring_failed:' || c.txid || ':' || p_attempt) e;
end $$;
revoke all on function catraca_notify_recurring_failed(text, integer, text, boolean) from public;
grant execute on function catraca_notify_recurring_failed(text, integer, text, boolean) to catraca_portal;
