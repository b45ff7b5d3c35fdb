-- Where each debited request ran: the deployment that answered (its name; 'primary' for the
-- model's own row) and the region and country it declared (`model deployment add --region
-- --country`), shown by /generation. Recorded by catraca_settle and catraca_settle_batch
-- (src/db/functions/) from the worker's usage message.
alter table ledger
  add column deployment text,
  add column region text,
  add column country text;
