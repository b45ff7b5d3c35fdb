-- Notas fiscais (NFS-e Nacional, issue 28; src/nfse/). One row per note to issue: per credited
-- top-up (NFSE_EMIT_ON=topup) or per tenant and month (monthly). The row is the outbox: made in
-- the transaction that credited the top-up (catraca_invoice_topup), then published to the
-- JetStream stream NFSE; the portal's issuer takes it from there, and the schedule of its attempts
-- lives here (next_attempt_at), so a restart loses nothing.
--   dps_serie, dps_number  the DPS's series and number (nDPS): fixed when the row is made, the
--                          idempotency key — Sefin refuses a second NFS-e for them (E0014), and
--                          that refusal is how a repeat is recognised
--   dps_id, dps_xml        the DPS as signed and sent (kept before it is sent, the same bytes on
--                          every attempt until an operator's retry rebuilds it)
--   state                  pending → issued, or rejected (error_code/error_message: Sefin's), or
--                          pending again after an operator's retry; unavailable answers keep it
--                          pending with the next attempt later
--   nfse_xml               the NFS-e as Sefin returned it, byte for byte, with its access key
--   cancel_state           after a refund: pending → done (event_xml), or refused (code and
--                          message), outside_window (the operator must ask the municipality),
--                          partial_refund (a partial refund cannot cancel: substitute the note)
create sequence nfse_dps_number as bigint minvalue 1 maxvalue 999999999999999;

create table nfse_settings (
  name       text primary key,
  value      text not null,
  updated_at timestamptz not null default now()
);

create table invoices (
  id               text primary key,
  tenant_id        text not null references tenants(id),
  kind             text not null check (kind in ('topup', 'monthly')),
  pix_txid         text unique references pix_charges(txid),
  period           date,
  amount_micros    bigint not null check (amount_micros > 0 and amount_micros % 10000 = 0),
  competence_at    timestamptz not null,
  dps_serie        text not null check (dps_serie ~ '^[0-9]{1,5}$'),
  dps_number       bigint not null default nextval('nfse_dps_number'),
  dps_id           text,
  dps_xml          text,
  profile_id       bigint references billing_profiles(id),
  state            text not null default 'pending' check (state in ('pending', 'issued', 'rejected')),
  attempts         integer not null default 0,
  next_attempt_at  timestamptz not null default now(),
  claimed_until    timestamptz,
  error_code       text,
  error_message    text,
  access_key       text unique check (access_key is null or access_key ~ '^[0-9A-Z]{50}$'),
  nfse_number      text,
  nfse_xml         bytea,
  issued_at        timestamptz,
  cancel_state     text check (cancel_state in ('pending', 'done', 'refused', 'outside_window', 'partial_refund')),
  cancel_note      text,
  cancel_requested_at timestamptz,
  cancelled_at     timestamptz,
  event_xml        bytea,
  published_at     timestamptz,
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  unique (dps_serie, dps_number),
  check ((kind = 'topup') = (pix_txid is not null)),
  check ((kind = 'monthly') = (period is not null))
);
create unique index invoices_monthly_once on invoices (tenant_id, period) where kind = 'monthly';
create index invoices_tenant on invoices (tenant_id, created_at desc);
create index invoices_due on invoices (next_attempt_at) where state = 'pending' or cancel_state = 'pending';
create index invoices_rejected on invoices (updated_at) where state = 'rejected' or cancel_state in ('refused', 'outside_window', 'partial_refund');

-- The portal credits top-ups and runs the issuer; the console and the admin CLI list notes and
-- retry or cancel them (a state change the issuer then acts on).
grant select, insert, update on invoices to catraca_portal;
grant select, insert, update on nfse_settings to catraca_portal;
grant usage on sequence nfse_dps_number to catraca_portal;
grant select on invoices, nfse_settings to catraca_console, catraca_admin;
grant update (state, dps_id, dps_xml, profile_id, attempts, next_attempt_at, claimed_until, error_code, error_message, cancel_state, cancel_note, cancel_requested_at, published_at, updated_at)
  on invoices to catraca_console, catraca_admin;
