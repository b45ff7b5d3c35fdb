-- The vendor's batch cost, for the console's margin (src/console/money.ts, docs/batch.md "In the
-- console"):
--   model_vendor_costs.batch_*  what the vendor bills per 1M tokens for a line run through its own
--                     batch API (a batch in `vendor` mode: its batch discount), in the row's currency
--                     and at the row's rate, like the row's online prices. Null: the online price of
--                     the same row applies (for the cached and cache-write prices: their online
--                     price, itself the input price where none is set).
--   vendor_batch_ids  every batch that ran in `vendor` mode. batches.mode says so only as long as
--                     the sweeper keeps the batch (BATCH_RETENTION_DAYS after it ended); this table
--                     is never swept, so a month's margin can still tell a vendor-mode line
--                     (ledger.batch_id) from a queue-mode one. Written by the front door in the
--                     statement that sets batches.mode = 'vendor' (src/batch/vendor.ts); the
--                     vendor-mode batches already there are copied below.
alter table model_vendor_costs
  add column batch_input_price          bigint check (batch_input_price >= 0),
  add column batch_cached_input_price   bigint check (batch_cached_input_price >= 0),
  add column batch_cache_write_price    bigint check (batch_cache_write_price >= 0),
  add column batch_cache_write_1h_price bigint check (batch_cache_write_1h_price >= 0),
  add column batch_output_price         bigint check (batch_output_price >= 0);

create table vendor_batch_ids (
  batch_id   text primary key,
  created_at timestamptz not null default now()
);

insert into vendor_batch_ids (batch_id, created_at)
select id, coalesce(in_progress_at, created_at) from batches where mode = 'vendor'
on conflict (batch_id) do nothing;

-- (model_vendor_costs keeps 040's grants: select and insert of whole rows for the console)
grant insert on vendor_batch_ids to catraca_gateway;
grant select on vendor_batch_ids to catraca_console, catraca_admin;
