-- Batches of OpenAI's Batch API (POST /v1/batches), `queue` mode: catraca runs the lines of the
-- input file itself, each through the ordinary path (admission, hold, one debit per line), taken
-- by front doors from the JetStream work queue BATCH (src/batch/runner.ts, docs/batch.md).
--   total / completed / failed   OpenAI's request_counts; a line is counted once, when its result row is written
--   expires_at   the end of the completion window (24 h): lines not run by then are error lines, the batch `expired`
create table batches (
  id                text primary key,
  tenant_id         text not null,
  key_id            text not null,
  input_file_id     text not null,
  endpoint          text not null,
  completion_window text not null,
  metadata          jsonb,
  status            text not null check (status in ('validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled')),
  total             integer not null,
  completed         integer not null default 0,
  failed            integer not null default 0,
  output_file_id    text,
  error_file_id     text,
  created_at        timestamptz not null default now(),
  in_progress_at    timestamptz,
  finalizing_at     timestamptz,
  completed_at      timestamptz,
  cancelling_at     timestamptz,
  cancelled_at      timestamptz,
  expired_at        timestamptz,
  expires_at        timestamptz not null
);
create index batches_tenant on batches (tenant_id, id);

-- One row per line that ended (its answer, an error, or cancelled): the line runs at most once
-- (the row's primary key), and the output and error files are built from these rows at the end.
--   request_id   the line's request (its ledger debit, /v1/generation); null when it never ran
--   ok           true: the output file; false: the error file; null: the line is running (claimed)
create table batch_results (
  batch_id    text not null,
  line        integer not null,
  custom_id   text not null,
  request_id  text,
  status_code integer,
  body        jsonb,
  error       jsonb,
  ok          boolean,
  primary key (batch_id, line)
);

grant select, insert, update on batches to catraca_gateway;
grant select, insert, update on batch_results to catraca_gateway;
grant select on batches, batch_results to catraca_console, catraca_admin;
