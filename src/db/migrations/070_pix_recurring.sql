-- Recurring top-ups by Pix Automático (issue 29; src/pix/recurring/, docs/billing.md "Recarga
-- automática"):
--   pix_recurrences  a tenant's recurrence at the PSP (idRec): the payer, the periodicity, the
--                    target balance and the maximum per charge the tenant chose, its state as the
--                    PSP reports it (CRIADA → APROVADA → CANCELADA…), the authorization QR, and the
--                    due date of the next period's charge. At most one live (CRIADA or APROVADA)
--                    recurrence per tenant.
--   pix_charges      a recurring charge (cobr) is a charge like a one-off top-up (same txid space,
--                    same credit, catraca_pix_credit, once per endToEndId, same topup.credited and
--                    whatever else follows a top-up's credit), with its recurrence, due date and
--                    failed attempts; it has no BR Code of its own (the payer's bank debits it).
create table pix_recurrences (
  id_rec         text primary key check (id_rec ~ '^[a-zA-Z0-9]{29}$'),
  tenant_id      text not null references tenants(id),
  provider       text not null,
  periodicity    text not null check (periodicity in ('SEMANAL', 'MENSAL')),
  target_micros  bigint not null check (target_micros > 0 and target_micros % 10000 = 0),
  max_micros     bigint not null check (max_micros >= 1000000 and max_micros % 10000 = 0),
  payer_document text not null check (payer_document ~ '^([0-9]{11}|[0-9A-Z]{14})$'),
  payer_name     text not null check (length(payer_name) between 1 and 140),
  retry_policy   text not null check (retry_policy in ('NAO_PERMITE', 'PERMITE_3R_7D')),
  journey        text not null,
  status         text not null default 'CRIADA' check (status in ('CRIADA', 'APROVADA', 'REJEITADA', 'EXPIRADA', 'CANCELADA')),
  br_code        text,
  location       text,
  first_txid     text references pix_charges(txid),
  next_due_date  date,
  ended_by       text,
  ended_code     text,
  ended_reason   text,
  created_at     timestamptz not null default now(),
  authorized_at  timestamptz,
  ended_at       timestamptz,
  checked_at     timestamptz
);
create unique index pix_recurrences_live on pix_recurrences (tenant_id) where status in ('CRIADA', 'APROVADA');
create index pix_recurrences_due on pix_recurrences (next_due_date) where status = 'APROVADA';

alter table pix_charges
  add column id_rec text references pix_recurrences(id_rec),
  add column due_date date,
  add column failures integer not null default 0,
  add column last_failure text,
  alter column br_code drop not null,
  add constraint pix_charges_one_off_has_br_code check (id_rec is not null or br_code is not null),
  add constraint pix_charges_recurring_due check ((id_rec is null) = (due_date is null));
create index pix_charges_rec on pix_charges (id_rec, due_date) where id_rec is not null;

grant select,
      insert (id_rec, tenant_id, provider, periodicity, target_micros, max_micros, payer_document, payer_name, retry_policy, journey, status, br_code, location, first_txid),
      update (status, journey, br_code, next_due_date, ended_by, ended_code, ended_reason, authorized_at, ended_at, checked_at)
  on pix_recurrences to catraca_portal;
grant insert (id_rec, due_date), update (failures, last_failure) on pix_charges to catraca_portal;
grant select on pix_recurrences to catraca_admin, catraca_console;

-- topup.recurring_failed is e-mailed by default (tenants who chose their e-mails keep their choice)
alter table notify_tenants alter column email_events
  set default array['balance.low', 'balance.depleted', 'topup.credited', 'topup.recurring_failed', 'key.limit_reached', 'key.revoked', 'key.expiring'];
