-- The operator's console (src/console/, issue 21): operator accounts with a password and TOTP,
-- their sessions and sign-in throttle, and the audit log of everything an operator does. The
-- console connects as catraca_console (created by the migration runner, src/db/roles.ts).
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'catraca_console') then
    raise exception 'the role catraca_console does not exist: run the migrations once as a superuser (npm run migrate), which creates it (docs/operations.md, "Least privilege")';
  end if;
  execute format('grant connect on database %I to catraca_console', current_database());
end $$;

-- Operators: the people who run catraca, not tenants' users. The first is created by the CLI
-- (`catraca operator create`), later ones by an operator in the console. The TOTP secret (RFC
-- 6238, base32) must be read to check a code, so it is stored as it is, readable by the console
-- alone; totp_last_step is the last 30-second step a code was accepted for: a code works once.
create table operators (
  id             text primary key,
  email          text not null unique,
  password_hash  text not null,
  totp_secret    text not null,
  totp_last_step bigint not null default 0,
  created_at     timestamptz not null default now(),
  created_by     text,               -- the operator who created it; null: the CLI
  disabled_at    timestamptz
);

-- Recovery codes, shown once at creation; only their SHA-256 is kept, each works once.
create table operator_recovery_codes (
  operator_id text not null references operators(id),
  code_hash   bytea not null,
  used_at     timestamptz,
  primary key (operator_id, code_hash)
);

-- Sessions as the portal's: the cookie's token is never stored, only its SHA-256.
create table operator_sessions (
  id           bytea primary key,
  operator_id  text not null references operators(id),
  csrf_secret  text not null,
  ip           text,
  created_at   timestamptz not null default now(),
  last_seen_at timestamptz not null default now(),
  expires_at   timestamptz not null
);
create index operator_sessions_operator on operator_sessions (operator_id);

-- Sign-in attempts that failed (or are in flight): the throttle counts them per e-mail and per
-- address; a successful sign-in deletes those of its (e-mail, address) pair.
create table operator_login_failures (
  id         bigserial primary key,
  email      text not null,
  ip         text not null,
  created_at timestamptz not null default now()
);
create index operator_login_failures_email on operator_login_failures (email, created_at);
create index operator_login_failures_ip on operator_login_failures (ip, created_at);

-- Every operator action, and every sign-in and failed sign-in: who, when, from where, what it
-- touched, before and after. Append-only: the trigger below refuses UPDATE, DELETE and TRUNCATE
-- for anyone (the owner and superusers included), and the console may only INSERT and SELECT.
create table console_audit (
  id             bigserial primary key,
  at             timestamptz not null default now(),
  operator_id    text references operators(id),
  operator_email text,               -- the e-mail as typed, for a failed sign-in of no operator
  action         text not null,
  ip             text,
  tenant_id      text,
  target         text,               -- a key id, a model id, a deployment id, an operator id …
  reason         text,
  before         jsonb,
  after          jsonb
);
create index console_audit_at on console_audit (at desc, id desc);
create index console_audit_tenant on console_audit (tenant_id, at desc) where tenant_id is not null;

-- (Its current definition is src/db/functions/catraca_console_audit_append_only.sql.)
create function catraca_console_audit_append_only() returns trigger
language plpgsql as $$
begin
  raise exception 'console_audit is append-only: % refused', tg_op using errcode = '42501';
end $$;
revoke all on function catraca_console_audit_append_only() from public;
create trigger console_audit_no_update before update or delete on console_audit
  for each row execute function catraca_console_audit_append_only();
create trigger console_audit_no_truncate before truncate on console_audit
  for each statement execute function catraca_console_audit_append_only();

-- A ledger row an adjustment made refers to the request it corrects (a refund of a failed vendor
-- call, a debit of a shortfall): request_id stays the request's own debit, exactly once.
alter table ledger add column ref_request_id text;
create index ledger_ref_request on ledger (ref_request_id) where ref_request_id is not null;

-- The console: its own tables; reads across tenants, keys, ledger, Pix and the catalog; the writes
-- it makes (suspension, key revocation, catalog prices). Money moves only through
-- catraca_console_grant and catraca_console_adjust (src/db/functions/), which audit in the same
-- transaction.
grant select, insert, update (password_hash, totp_last_step, disabled_at) on operators to catraca_console;
grant select, insert, update (used_at) on operator_recovery_codes to catraca_console;
grant select, insert, update (last_seen_at), delete on operator_sessions to catraca_console;
grant select, insert, delete on operator_login_failures to catraca_console;
grant select, insert on console_audit to catraca_console;
grant usage on sequence operator_login_failures_id_seq, console_audit_id_seq to catraca_console;
grant select on tenants, api_keys, holds, ledger, pix_charges, pix_refunds, models, model_aliases, model_deployments to catraca_console;
grant select (id, tenant_id, email, role, created_at, email_verified_at) on portal_users to catraca_console;
grant update (suspended_at, suspended_reason) on tenants to catraca_console;
grant update (revoked_at) on api_keys to catraca_console;
grant insert, update on models to catraca_console;
grant update (input_price, output_price, cached_input_price, cache_write_price, cache_write_1h_price, weight) on model_deployments to catraca_console;

-- The admin CLI: `catraca operator create|list|disable|reset` (never a session's or a code's secret read back).
grant select (id, email, created_at, created_by, disabled_at), insert, update (password_hash, totp_secret, totp_last_step, disabled_at) on operators to catraca_admin;
grant select (operator_id), insert, delete on operator_recovery_codes to catraca_admin;
grant select (operator_id), delete on operator_sessions to catraca_admin;
grant insert on console_audit to catraca_admin;
grant usage on sequence console_audit_id_seq to catraca_admin;
