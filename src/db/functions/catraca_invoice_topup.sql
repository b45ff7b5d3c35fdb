-- The nota fiscal of a credited top-up (src/nfse), made in the transaction that credited it
-- (src/pix/service.ts, after catraca_pix_credit), so the note to issue exists exactly when the
-- credit does: when issuing is on (nfse_settings 'since', written by the portal's issuer at start)
-- with NFSE_EMIT_ON=topup ('emit_on'). Once per charge (pix_txid is unique). Returns the
-- invoice's id, or null when none is made.
create or replace function catraca_invoice_topup(p_txid text)
returns text
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_id text;
  v_serie text;
begin
  if not exists (select 1 from nfse_settings where name = 'since')
     or coalesce((select value from nfse_settings where name = 'emit_on'), 'topup') <> 'topup' then
    return null;
  end if;
  v_serie := coalesce((select value from nfse_settings where name = 'serie'), '1');
  insert into invoices (id, tenant_id, kind, pix_txid, amount_micros, competence_at, dps_serie)
  select 'inv_' || replace(gen_random_uuid()::text, '-', ''), c.tenant_id, 'topup', c.txid, c.amount_micros, c.paid_at, v_serie
    from pix_charges c
   where c.txid = p_txid and c.status = 'CONCLUIDA' and c.end_to_end_id is not null and c.paid_at is not null
  on conflict (pix_txid) do nothing
  returning id into v_id;
  return v_id;
end $$;
revoke all on function catraca_invoice_topup(text) from public;
grant execute on function catraca_invoice_topup(text) to catraca_portal;
