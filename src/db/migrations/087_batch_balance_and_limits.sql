-- Batches (issue 30; docs/batch.md "Money", "Limits"): a batch whose balance ran out. Once a line
-- is refused 402 `insufficient_balance` (the tenant's balance, not a key's limit), the runner marks
-- its batch out of balance and, in the same transaction, ends every line not yet started as an
-- error line with a 402 `insufficient_balance` body: no later line runs (src/batch/runner.ts).
--   out_of_balance_at     when the first line was refused for the balance; null otherwise
--   out_of_balance_line   that line (0-based)
alter table batches add column out_of_balance_at timestamptz;
alter table batches add column out_of_balance_line integer;

-- the per-tenant caps on batches in flight (BATCH_MAX_IN_FLIGHT, BATCH_MAX_LINES_IN_FLIGHT) count
-- a tenant's unfinished batches
create index batches_in_flight on batches (tenant_id) where status in ('validating', 'in_progress', 'finalizing', 'cancelling');
