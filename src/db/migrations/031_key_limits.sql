-- Finer key limits, counted across every front door (keys with any of them take a hold per
-- request, never a front door's lease: the counts live under the key's row lock):
--   max_concurrent        requests of the key in flight at once (its open holds)
--   tpm                   tokens per minute, counted at admission as OpenAI counts them: the
--                         request's prompt estimate plus its output cap (tpm_window_*: the minute)
--   end_user_daily_limit  micro-BRL each end user (the request's `user`) may spend per UTC day
--   created_by            who created the key (a portal user; null: an operator's CLI)
-- holds.end_user: the end user of a request in flight (the daily cap counts what it may still cost).
alter table api_keys
  add column created_by text,
  add column max_concurrent integer check (max_concurrent > 0),
  add column tpm integer check (tpm > 0),
  add column tpm_window_start timestamptz,
  add column tpm_window_tokens bigint not null default 0,
  add column end_user_daily_limit bigint check (end_user_daily_limit > 0);
alter table holds add column end_user text;
create index holds_key_requests on holds (key_id) where kind = 'request';
