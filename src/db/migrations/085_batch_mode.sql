-- How a batch's lines run, per deployment (issue 30; docs/batch.md "vendor mode"):
--   vendor  the deployment's own batch API (OpenAI's Batch API with its files), polled until done
--   queue   catraca runs the lines itself (the JetStream work queue BATCH), the default
--   none    a batch line naming the model is an error line (batch_not_supported)
-- The primary deployment's mode is the model's row; the others', model_deployments'.
alter table models add column batch_mode text not null default 'queue' check (batch_mode in ('vendor', 'queue', 'none'));
alter table model_deployments add column batch_mode text not null default 'queue' check (batch_mode in ('vendor', 'queue', 'none'));

-- A batch run in vendor mode (batches.mode), and the vendor batches it was submitted as: one per
-- chunk of lines the balance covered (their holds taken before the chunk was submitted).
--   lines          the batch's line numbers in this chunk (0-based), in the order sent to the vendor
--   vendor_batch_id  the vendor's batch id (null until the vendor accepted it: a door that stops
--                  before then submits the chunk again on resume, with the same request ids)
--   cancel_sent    the vendor was told to cancel
--   ended_at       the chunk's results were mapped back (each line's result row written)
alter table batches add column mode text not null default 'queue' check (mode in ('queue', 'vendor'));
-- the next time a front door looks at a vendor-mode batch (a door claims it by moving this ahead)
alter table batches add column vendor_next_at timestamptz;
create index batches_vendor_due on batches (vendor_next_at) where mode = 'vendor' and status in ('in_progress', 'cancelling');

create table vendor_batch_chunks (
  batch_id        text not null,
  chunk           integer not null,
  model_id        text not null,
  deployment      text not null,
  pool            text not null,
  lines           integer[] not null,
  vendor_batch_id text,
  vendor_status   text,
  cancel_sent     boolean not null default false,
  created_at      timestamptz not null default now(),
  ended_at        timestamptz,
  primary key (batch_id, chunk)
);

grant select, insert, update on vendor_batch_chunks to catraca_gateway;
grant delete on vendor_batch_chunks to catraca_gateway;
grant select on vendor_batch_chunks to catraca_console, catraca_admin;
-- a front door takes a vendor batch's next chunk only once the holds of the lines it ran are
-- settled (metering debits them): it looks for them by request id
grant select (request_id) on holds to catraca_gateway;
