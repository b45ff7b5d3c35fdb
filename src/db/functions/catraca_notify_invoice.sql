-- invoice.issued for a nota fiscal just issued (src/nfse/issuer.ts calls it in the transaction
-- that stores the NFS-e): its access key, number, amount and where its XML is. Once per invoice
-- (dedup_key). Returns the event made.
create or replace function catraca_notify_invoice(p_invoice text, p_xml_url text)
returns setof notify_events
language plpgsql
security definer
set search_path = public, pg_temp
set timezone = 'UTC'
as $$
begin
  return query
  select e.*
    from (select i.id, i.tenant_id, i.pix_txid, i.period, i.access_key, i.nfse_number, i.amount_micros, i.issued_at
            from invoices i where i.id = p_invoice and i.state = 'issued' and i.access_key is not null) i,
         lateral catraca_notify_event(i.tenant_id, 'invoice.issued',
                                      jsonb_build_object('tenant_id', i.tenant_id, 'invoice_id', i.id, 'charge_id', i.pix_txid,
                                                         'period', to_char(i.period, 'YYYY-MM'),
                                                         'access_key', i.access_key, 'number', i.nfse_number,
                                                         'amount', (i.amount_micros / 1000000)::text || '.' || lpad((i.amount_micros % 1000000)::text, 6, '0'),
                                                         'issued_at', i.issued_at, 'xml_url', p_xml_url),
                                      'invoice.issued:' || i.id) e;
end $$;
revoke all on function catraca_notify_invoice(text, text) from public;
grant execute on function catraca_notify_invoice(text, text) to catraca_portal;
