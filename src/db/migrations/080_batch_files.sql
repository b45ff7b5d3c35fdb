-- Files uploaded with POST /v1/files (purpose "batch": JSONL, one request a line), per tenant, until
-- expires_at (BATCH_RETENTION_DAYS); metering's sweeper deletes expired rows (src/batch/files.ts).
-- PostgreSQL, not the JetStream object store: a file is listed per tenant with a cursor, expires by
-- an indexed date and will be referenced by batches in the same transaction (docs/batch.md).
--   id       file-<12 hex of the creation time in ms><12 random hex>: sorts by creation
--   lines    how many request lines the file holds (validated at upload)
create table batch_files (
  id          text primary key,
  tenant_id   text not null,
  key_id      text not null,
  purpose     text not null check (purpose in ('batch', 'batch_output')),
  filename    text not null,
  bytes       integer not null,
  lines       integer not null,
  content     bytea not null,
  created_at  timestamptz not null default now(),
  expires_at  timestamptz not null
);
-- no foreign keys on tenant and key: the same reasoning as responses' (044): an insert beside
-- admissions must not take locks on their rows; the ids are the authenticated key's own.
create index batch_files_tenant on batch_files (tenant_id, id);
create index batch_files_expiry on batch_files (expires_at);

grant select, insert, delete on batch_files to catraca_gateway;
grant select, delete on batch_files to catraca_metering;
grant update (expires_at) on batch_files to catraca_metering; -- the sweeper's `for update skip locked`
grant select on batch_files to catraca_console, catraca_admin;
