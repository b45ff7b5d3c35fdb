-- OpenAI's Batch object fields beyond the first cut (issue 30): `model` (the model every line
-- names, null when they differ), `output_expires_after` (how long the output and error files are
-- kept, 1 h to 30 d; null: BATCH_RETENTION_DAYS), and `usage`, the tokens of its lines summed from
-- their ledger debits: a partial index on ledger.batch_id (only batch lines' rows carry one).
alter table batches
  add column model text,
  add column output_expires_seconds integer check (output_expires_seconds between 3600 and 2592000);
create index if not exists ledger_batch_id on ledger (batch_id) where batch_id is not null;

-- metering's retention sweep deletes a vendor-mode batch's chunks with its rows (src/batch/sweeper.ts)
grant select, delete on vendor_batch_chunks to catraca_metering;
