-- Prices in dollars sold in reais (issue 29; src/fx/, docs/billing.md "Prices in dollars"):
--   fx_rates          the dollar's rate catraca prices at, from the time it took it on (valid_from):
--                     the BCB's PTAX selling rate of a day, or a rate an operator pinned. The
--                     console's margin view costs USD vendor prices at the rate in force then.
--   fx_status         the PTAX job: when it last fetched, since when it fails (the metric and the
--                     console's banner), the rate an operator pinned, the last day recomputed.
--   model_usd_prices  a model's (deployment 'primary') or deployment's vendor price in USD
--                     (micro-USD per 1M tokens; null cache prices: the input price) and markup
--                     (parts per million), and the rate and date of the BRL prices in force, which
--                     are written to models / model_deployments like any price change.
create table fx_rates (
  id             bigserial primary key,
  rate_date      date not null,
  usd_brl_micros bigint not null check (usd_brl_micros > 0),
  source         text not null check (source in ('ptax', 'pinned')),
  published_at   text,
  valid_from     timestamptz not null default now(),
  set_by         text
);
create index fx_rates_valid on fx_rates (valid_from desc, id desc);

create table fx_status (
  name           text primary key,
  last_ok_at     timestamptz,
  failing_since  timestamptz,
  last_error     text,
  pinned_micros  bigint check (pinned_micros > 0),
  pinned_by      text,
  pinned_at      timestamptz,
  last_run_date  date
);

create table model_usd_prices (
  model_id           text not null,
  deployment         text not null default 'primary',
  input_usd          bigint not null check (input_usd >= 0),
  output_usd         bigint not null check (output_usd >= 0),
  cached_input_usd   bigint check (cached_input_usd >= 0),
  cache_write_usd    bigint check (cache_write_usd >= 0),
  cache_write_1h_usd bigint check (cache_write_1h_usd >= 0),
  markup_ppm         bigint not null check (markup_ppm between 1000000 and 100000000),
  rate_micros        bigint,
  rate_date          date,
  priced_at          timestamptz,
  primary key (model_id, deployment)
);

grant select, insert, update on fx_rates, fx_status, model_usd_prices to catraca_console, catraca_admin;
grant delete on model_usd_prices to catraca_console, catraca_admin;
grant usage on sequence fx_rates_id_seq to catraca_console, catraca_admin;
grant select on fx_rates, model_usd_prices to catraca_portal, catraca_gateway;
-- the recompute writes every BRL price of a model (the console could change three of them)
grant update (cache_write_price, cache_write_1h_price) on models to catraca_console;
