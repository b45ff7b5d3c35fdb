-- topup.credited for a paid Pix charge (src/notify): src/pix/service.ts calls it in the transaction
-- that credited the charge (catraca_pix_credit), so the event exists exactly when the credit does.
-- Once per charge (dedup_key). Returns the event made. When NFS-e issuing makes a note per
-- top-up (its row is made in the same transaction, before this), the event names it: invoice_id,
-- and access_key — null, since the note is issued after the credit; invoice.issued carries the
-- key once Sefin answered (docs/nfse.md). Without such a note the two keys are absent.
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
    from (select c.tenant_id, c.txid, c.end_to_end_id, c.amount_micros, c.paid_at, t.balance_micros, i.id as invoice_id, i.access_key
            from pix_charges c join tenants t on t.id = c.tenant_id
            left join invoices i on i.pix_txid = c.txid
           where c.txid = p_txid and c.status = 'CONCLUIDA' and c.end_to_end_id is not null) c,
         lateral catraca_notify_event(c.tenant_id, 'topup.credited',
                                      jsonb_build_object('tenant_id', c.tenant_id, 'charge_id', c.txid, 'end_to_end_id', c.end_to_end_id,
                                                         'amount', (c.amount_micros / 1000000)::text || '.' || lpad((c.amount_micros % 1000000)::text, 6, '0'),
                                                         'balance', (c.balance_micros / 1000000)::text || '.' || lpad((c.balance_micros % 1000000)::text, 6, '0'),
                                                         'paid_at', c.paid_at)
                                      || case when c.invoice_id is null then '{}'::jsonb
                                              else jsonb_build_object('invoice_id', c.invoice_id, 'access_key', c.access_key) end,
                                      'topup.credited:' || c.txid) e;
end $$;
revoke all on function catraca_notify_topup(text) from public;
grant execute on function catraca_notify_topup(text) to catraca_portal;
