-- Several deployments per catalog model (e.g. two OpenAI organisations, or OpenAI and another
-- host of the same weights). The model's own row (base_url, api_key_env, upstream_model, protocol,
-- prices) is its first deployment, named 'primary' (`catraca model set`); these are the others
-- (`catraca model deployment add`). Workers choose among healthy deployments by weight, fail over
-- before the first byte, and cool a failing one down. A null price is the model's.
alter table models add column weight integer not null default 1 check (weight between 1 and 1000);

create table model_deployments (
  id                   text primary key,
  model_id             text not null references models (id) on delete cascade,
  name                 text not null check (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' and name <> 'primary'),
  protocol             text not null check (protocol in ('sim', 'openai', 'anthropic')),
  base_url             text,
  api_key_env          text check (api_key_env ~ '^[A-Z_][A-Z0-9_]*$'),
  upstream_model       text not null,
  weight               integer not null default 1 check (weight between 1 and 1000),
  input_price          bigint check (input_price >= 0),
  output_price         bigint check (output_price >= 0),
  cached_input_price   bigint check (cached_input_price >= 0),
  cache_write_price    bigint check (cache_write_price >= 0),
  cache_write_1h_price bigint check (cache_write_1h_price >= 0),
  created_at           timestamptz not null default now(),
  unique (model_id, name)
);
create index model_deployments_model on model_deployments (model_id);
