-- Credits a paid Pix charge: the charge's amount to the charge's tenant (source 'pix', external id
-- the endToEndId, note the txid), at most once per charge: only this function sets a charge's
-- end_to_end_id, and it refuses a charge that has one. The portal's role may call this, not
-- catraca_credit: its credits are always a charge's. The caller (src/pix/service.ts) has checked
-- the payment against the PSP under the charge's row lock.
create or replace function catraca_pix_credit(p_txid text, p_end_to_end_id text, p_paid_at timestamptz)
returns table (status text, balance bigint)
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare ch pix_charges%rowtype;
begin
  select * into ch from pix_charges where txid = p_txid for update;
  if not found then raise exception 'no Pix charge %', p_txid; end if;
  if ch.end_to_end_id is not null then
    raise exception 'charge % cannot take a payment: it was paid already (%)', p_txid, ch.end_to_end_id;
  end if;
  if ch.status not in ('ATIVA', 'EXPIRADA') then
    raise exception 'charge % cannot take a payment: its status is %', p_txid, ch.status;
  end if;
  update pix_charges set status = 'CONCLUIDA', end_to_end_id = p_end_to_end_id, paid_at = p_paid_at where txid = p_txid;
  return query select c.status, c.balance from catraca_credit(ch.tenant_id, ch.amount_micros, 'pix', p_end_to_end_id, p_txid) c;
end $$;
revoke all on function catraca_pix_credit(text, text, timestamptz) from public;
grant execute on function catraca_pix_credit(text, text, timestamptz) to catraca_portal;
