-- topup.credited for a paid Pix charge (src/notify): src/pix/service.ts calls it in the transaction
-- that credited the charge (catraca_pix_credit), so the event exists exactly when the credit does.
-- Once per charge (dedup_key). Returns the event made.
create or replace function catraca_notify_topup(p_txid text)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
begin
  return query
  select e.*
    from (select c.tenant_id, c.txid, c.end_to_end_id, c.amount_micros, c.paid_at, t.balance_micros
            from pix_charges c join tenants t on t.id = c.tenant_id
           where c.txid = p_txid and c.status = 'CONCLUIDA' and c.end_to_end_id is not null) c,
         lateral catraca_notify_event(c.tenant_id, 'topup.credited',
                                      jsonb_build_object('tenant_id', c.tenant_id, 'charge_id', c.txid, 'end_to_end_id', c.end_to_end_id,
                                                         'amount', (c.amount_micros / 1000000)::text || '.' || lpad((c.amount_micros % 1000000)::text, 6, '0'),
                                                         'balance', (c.balance_micros / 1000000)::text || '.' || lpad((c.balance_micros % 1000000)::text, 6, '0'),
                                                         'paid_at', c.paid_at),
                                      'topup.credited:' || c.txid) e;
end $$;
revoke all on function catraca_notify_topup(text) from public;
grant execute on function catraca_notify_topup(text) to catraca_portal;
