-- What each debited request was, beyond its input and output tokens (shown by /generation, the
-- portal and exports):
--   cached_tokens, cache_write_tokens, cache_write_1h_tokens  input read from / written to the
--                         vendor's prompt cache (part of input_tokens), billed at their own prices
--   reasoning_tokens      output spent on reasoning (part of output_tokens)
--   route                 the public API the request came in by (chat, messages, responses, …)
--   end_user              the client's own end user (OpenAI's `user`, Anthropic's metadata.user_id)
alter table ledger
  add column cached_tokens integer,
  add column cache_write_tokens integer,
  add column cache_write_1h_tokens integer,
  add column reasoning_tokens integer,
  add column route text,
  add column end_user text;
create index ledger_end_user on ledger (tenant_id, end_user, created_at) where end_user is not null;

-- catraca_settle takes the same detail (src/db/functions/catraca_settle.sql): its 11-argument
-- version goes, the file defines the new one.
drop function if exists catraca_settle(text, text, text, bigint, text, integer, integer, boolean, text, timestamptz, text);
