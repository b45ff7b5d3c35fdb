-- The portal's "Lotes" page (issue 30; docs/batch.md "In the portal"): a tenant's batches, OpenAI's
-- and Anthropic's, with their counts, the spend of their lines (ledger debits naming the batch,
-- migration 084) and their output and error files (OpenAI's: batch_output files; Anthropic's
-- results: batch_results rows). Read only: the portal never changes a batch.
grant select on batches, batch_results to catraca_portal;
grant select (id, tenant_id, content, expires_at) on batch_files to catraca_portal;

-- A batch's spend is summed over the ledger rows naming it: the partial index ledger_batch_id
-- (migration 090) serves it.
