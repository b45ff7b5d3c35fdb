-- Notifications (issue 20): webhooks (Standard Webhooks) and e-mails about a tenant's balance, top-ups
-- and keys. docs/notifications.md describes the events; src/notify/ the code.
--
--   notify_tenants     per tenant: the low-balance threshold and the events e-mailed (the portal's
--                      settings), and the state of the balance crossings (low_fired, depleted_fired),
--                      written by catraca_notify_balance under the row's lock, and by the portal when
--                      it saves a new threshold (set as the balance then is: saving fires nothing)
--   notify_endpoints   the tenant's webhook endpoints. `secret` (whsec_…) signs every delivery, so it
--                      is kept as it is (a hash could not sign); it is shown once and never logged.
--                      After a rotation the previous one keeps signing too until previous_until.
--   notify_events      the outbox: each event once (dedup_key), written in the transaction that made
--                      it (the catraca_notify_* functions), then published to the JetStream stream
--                      NOTIFY (published_at); id is the webhook-id
--   notify_deliveries  each event × endpoint (channel webhook) and its e-mail (channel email, no
--                      endpoint): state, attempts, when the next attempt is due
--   notify_attempts    the delivery log: every attempt, its HTTP status, duration and error
create table notify_tenants (
  tenant_id          text primary key references tenants(id),
  low_balance_micros bigint check (low_balance_micros > 0),
  email_events       text[] not null default array['balance.low', 'balance.depleted', 'topup.credited', 'key.limit_reached', 'key.revoked', 'key.expiring'],
  low_fired          boolean not null default false,
  depleted_fired     boolean not null default false,
  updated_at         timestamptz not null default now()
);

create table notify_endpoints (
  id              text primary key,
  tenant_id       text not null references tenants(id),
  url             text not null check (length(url) <= 2000),
  events          text[] not null check (cardinality(events) > 0),
  enabled         boolean not null default true,
  secret          text not null,
  previous_secret text,
  previous_until  timestamptz,
  disabled_reason text,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now()
);
create index notify_endpoints_tenant on notify_endpoints (tenant_id);

create table notify_events (
  id           text primary key,
  tenant_id    text not null references tenants(id),
  type         text not null,
  data         jsonb not null,
  dedup_key    text unique,
  created_at   timestamptz not null default now(),
  published_at timestamptz
);
create index notify_events_unpublished on notify_events (created_at) where published_at is null;
create index notify_events_time on notify_events (created_at);

create table notify_deliveries (
  id              bigserial primary key,
  event_id        text not null references notify_events(id) on delete cascade,
  tenant_id       text not null references tenants(id),
  endpoint_id     text references notify_endpoints(id) on delete cascade,
  channel         text not null check (channel in ('webhook', 'email')),
  state           text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
  attempts        integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  pix_txid        text,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  check ((channel = 'webhook') = (endpoint_id is not null))
);
create unique index notify_deliveries_once on notify_deliveries (event_id, coalesce(endpoint_id, ''));
create index notify_deliveries_due on notify_deliveries (next_attempt_at) where state = 'pending';
create index notify_deliveries_endpoint on notify_deliveries (endpoint_id);

create table notify_attempts (
  id          bigserial primary key,
  delivery_id bigint not null references notify_deliveries(id) on delete cascade,
  tenant_id   text not null references tenants(id),
  attempt     integer not null,
  status_code integer,
  duration_ms integer not null,
  error       text,
  created_at  timestamptz not null default now()
);
create index notify_attempts_tenant on notify_attempts (tenant_id, created_at desc);
create index notify_attempts_delivery on notify_attempts (delivery_id);
create index notify_attempts_time on notify_attempts (created_at);

-- the key.expiring scan
create index api_keys_expiring on api_keys (expires_at) where expires_at is not null and revoked_at is null;

-- The portal: its settings and endpoints, the dispatcher (src/portal/notifier/dispatcher.ts: deliveries,
-- attempts, publishing the outbox, the cleanup); events are made only by the catraca_notify_*
-- functions. Metering and the portal mark what they published.
grant select, insert (tenant_id, low_balance_micros, email_events, low_fired, depleted_fired, updated_at),
  update (low_balance_micros, email_events, low_fired, updated_at) on notify_tenants to catraca_portal;
grant select, insert, update, delete on notify_endpoints, notify_deliveries, notify_attempts to catraca_portal;
grant usage on sequence notify_deliveries_id_seq, notify_attempts_id_seq to catraca_portal;
grant select, update (published_at), delete on notify_events to catraca_portal;
grant select (id, published_at), update (published_at) on notify_events to catraca_metering;
