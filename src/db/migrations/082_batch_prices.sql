-- Batch prices (issue 30; docs/batch.md "Money"): what a line of a batch is held and debited at, per
-- model and per deployment, micro-BRL per 1M tokens like the online prices. Null: for a deployment,
-- the model's batch price; then the online price (the deployment's effective one) — so a model
-- without batch prices bills its batch lines at its online prices.
alter table models
  add column batch_input_price bigint check (batch_input_price >= 0),
  add column batch_output_price bigint check (batch_output_price >= 0),
  add column batch_cached_input_price bigint check (batch_cached_input_price >= 0),
  add column batch_cache_write_price bigint check (batch_cache_write_price >= 0),
  add column batch_cache_write_1h_price bigint check (batch_cache_write_1h_price >= 0);

alter table model_deployments
  add column batch_input_price bigint check (batch_input_price >= 0),
  add column batch_output_price bigint check (batch_output_price >= 0),
  add column batch_cached_input_price bigint check (batch_cached_input_price >= 0),
  add column batch_cache_write_price bigint check (batch_cache_write_price >= 0),
  add column batch_cache_write_1h_price bigint check (batch_cache_write_1h_price >= 0);
