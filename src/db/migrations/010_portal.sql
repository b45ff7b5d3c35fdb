-- Portal (users, sessions, login throttling) and Pix (charges, refunds, webhook audit).

create table portal_users (
  id            text primary key,
  tenant_id     text not null unique references tenants(id),
  email         text not null unique check (email = lower(email)),
  password_hash text not null,            -- argon2id PHC string
  created_at    timestamptz not null default now()
);

-- id is the SHA-256 of the random token held in the cookie: a leaked table does not leak sessions.
create table portal_sessions (
  id          bytea primary key,
  user_id     text not null references portal_users(id) on delete cascade,
  csrf_secret text not null,
  created_at  timestamptz not null default now(),
  expires_at  timestamptz not null
);
create index portal_sessions_expires on portal_sessions (expires_at);

-- Failed sign-ins, by e-mail and by client address (rate limit of the login form).
create table portal_login_failures (
  id         bigserial primary key,
  email      text not null,
  ip         text not null,
  created_at timestamptz not null default now()
);
create index portal_login_failures_email on portal_login_failures (email, created_at);
create index portal_login_failures_ip on portal_login_failures (ip, created_at);

-- Per-installation settings and secrets (webhook secret, simulator credentials). Never logged.
create table portal_settings (
  name       text primary key,
  value      text not null,
  updated_at timestamptz not null default now()
);

-- One immediate charge (cob) at the PSP. status follows the BCB API Pix (ATIVA, CONCLUIDA,
-- REMOVIDA_PELO_USUARIO_RECEBEDOR, REMOVIDA_PELO_PSP) plus our EXPIRADA for an ATIVA charge past
-- its expiry.
create table pix_charges (
  txid          text primary key check (txid ~ '^[a-zA-Z0-9]{26,35}$'),
  tenant_id     text not null references tenants(id),
  amount_micros bigint not null check (amount_micros > 0),
  status        text not null default 'ATIVA',
  provider      text not null,
  br_code       text not null,
  location      text,
  expires_at    timestamptz not null,
  end_to_end_id text unique,
  created_at    timestamptz not null default now(),
  paid_at       timestamptz,
  checked_at    timestamptz
);
create index pix_charges_tenant on pix_charges (tenant_id, created_at desc);
create index pix_charges_open on pix_charges (created_at) where status = 'ATIVA';

-- Devoluções (refunds) seen for our payments, exactly once by (endToEndId, id).
create table pix_refunds (
  end_to_end_id  text not null,
  refund_id      text not null,
  txid           text not null references pix_charges(txid),
  tenant_id      text not null references tenants(id),
  amount_micros  bigint not null check (amount_micros > 0),
  debited_micros bigint not null default 0,
  status         text not null,
  created_at     timestamptz not null default now(),
  primary key (end_to_end_id, refund_id)
);

-- Every webhook delivery and what became of it (credited, duplicate, unknown_txid, ...).
create table pix_webhook_events (
  id            bigserial primary key,
  outcome       text not null,
  txid          text,
  end_to_end_id text,
  detail        text,
  remote_addr   text,
  created_at    timestamptz not null default now()
);
create index pix_webhook_events_time on pix_webhook_events (created_at);

-- Refund of a Pix top-up: a debit exactly once per external id, never below zero. When the
-- refund exceeds what the tenant has available (balance - holds), only the available part is
-- debited and the row's note says so (status 'shortfall'); the caller logs it.
create function catraca_pix_refund(p_tenant text, p_amount bigint, p_external_id text, p_note text)
returns table (status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  v_balance bigint;
  v_held bigint;
  v_debit bigint;
begin
  if p_amount <= 0 then raise exception 'refund amount must be positive'; end if;
  select t.balance_micros, t.held_micros into v_balance, v_held from tenants t where t.id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint, 0::bigint; return;
  end if;
  if exists (select 1 from ledger where external_id = p_external_id) then
    return query select 'duplicate'::text, 0::bigint, v_balance; return;
  end if;
  v_debit := least(p_amount, greatest(v_balance - v_held, 0));
  update tenants set balance_micros = balance_micros - v_debit where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, cost_micros, note)
    values (p_tenant, 'debit', v_debit, v_balance, 'pix_refund', p_external_id, p_amount,
            case when v_debit < p_amount
                 then coalesce(p_note || '; ', '') || 'shortfall: refund exceeded the available balance by ' || (p_amount - v_debit)::text || ' micro-BRL'
                 else p_note end);
  return query select case when v_debit < p_amount then 'shortfall' else 'refunded' end, v_debit, v_balance;
end $$;
