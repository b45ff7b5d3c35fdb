-- The batch a debited request was a line of (issue 30 item 5: batch spend shown apart), null for
-- requests outside a batch. Recorded by catraca_settle and catraca_settle_batch (src/db/functions/)
-- from the settlement detail's batch_id, the same way 094 added deployment/region/country.
alter table ledger add column batch_id text;
