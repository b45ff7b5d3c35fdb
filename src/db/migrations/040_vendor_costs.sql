-- What each model costs us at its vendor, for the console's margin views (src/console/): prices per
-- 1M tokens in USD (micro-USD, with the exchange rate used, micro-BRL per USD) or in BRL
-- (micro-BRL). Every change is a new row from valid_from on, so a request is costed at the
-- prices and rate in force when it was made. Null cache prices: the input price.
create table model_vendor_costs (
  id                   bigserial primary key,
  model_id             text not null,          -- no foreign key: the history outlives a removed model
  valid_from           timestamptz not null default now(),
  currency             text not null check (currency in ('USD', 'BRL')),
  input_price          bigint not null check (input_price >= 0),
  cached_input_price   bigint check (cached_input_price >= 0),
  cache_write_price    bigint check (cache_write_price >= 0),
  cache_write_1h_price bigint check (cache_write_1h_price >= 0),
  output_price         bigint not null check (output_price >= 0),
  usd_brl_micros       bigint,
  set_by               text,                   -- the operator's id
  constraint vendor_cost_rate check ((currency = 'USD' and usd_brl_micros > 0) or (currency = 'BRL' and usd_brl_micros is null))
);
create index model_vendor_costs_model on model_vendor_costs (model_id, valid_from desc, id desc);

grant select, insert on model_vendor_costs to catraca_console;
grant usage on sequence model_vendor_costs_id_seq to catraca_console;
grant select on model_vendor_costs to catraca_admin;
