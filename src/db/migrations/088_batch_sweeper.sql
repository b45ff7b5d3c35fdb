-- Metering's sweeper for batches (issue 30; src/batch/sweeper.ts, docs/batch.md "Retention and
-- expiry"): it ends batches past their window that no runner will end (their lines not run written
-- as error lines, the output and error files written) and deletes the rows of batches ended more
-- than BATCH_RETENTION_DAYS ago.
grant select, insert, update, delete on batches, batch_results to catraca_metering;
grant insert on batch_files to catraca_metering;

-- unfinished batches by the end of their window (the expiry sweep) …
create index batches_unfinished_expiry on batches (expires_at) where status in ('validating', 'in_progress', 'cancelling');
-- … and ended ones by when they ended (the retention sweep)
create index batches_ended_at on batches (coalesce(completed_at, expired_at, cancelled_at, finalizing_at, in_progress_at, created_at))
  where status in ('completed', 'expired', 'cancelled', 'failed');
