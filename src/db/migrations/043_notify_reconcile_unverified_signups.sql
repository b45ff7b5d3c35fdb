-- Two backstops.
--
-- 1. The notifications' reconciling sweep (src/db/functions/catraca_notify_reconcile.sql, run by
--    metering's sweeper): metering checks balance.low, balance.depleted and key.limit_reached right
--    after each settlement commit, from ids it keeps in memory for a moment; a crash in that moment
--    loses the check, and a depleted tenant or a capped key gets no further settlement to make it
--    good. The sweep walks tenants and limited keys a page at a time from this shared cursor
--    (one row; whichever metering process holds it does the page), and checks those whose
--    notification state disagrees with their balance or spend.
create table notify_reconcile (
  id           boolean primary key default true check (id),
  tenant_after text not null default '',
  key_after    text not null default '',
  updated_at   timestamptz not null default now()
);
insert into notify_reconcile default values;
-- written only by catraca_notify_reconcile (its owner's); metering may read where the sweep stands
grant select on notify_reconcile to catraca_metering;
-- the keys with a BRL limit, in id order (neither column changes on the request path)
create index api_keys_limited on api_keys (id) where limit_micros is not null and revoked_at is null;

-- 2. Sign-ups never verified (src/portal/cleanup.ts): their logins, and their companies when nothing
--    else was made in them, are deleted PORTAL_UNVERIFIED_SIGNUP_DAYS after the sign-up. The
--    foreign keys of every table that references a tenant (none cascades) keep a used one.
create index portal_users_unverified on portal_users (created_at) where email_verified_at is null;
grant delete on tenants to catraca_portal;
