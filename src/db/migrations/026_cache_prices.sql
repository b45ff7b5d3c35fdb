-- Prompt caching billed at its own prices (micro-BRL per 1M tokens; null: the input price):
--   cached_input_price    input read from the vendor's prompt cache (OpenAI cached_tokens,
--                         Anthropic cache_read_input_tokens)
--   cache_write_price     input written to the cache at its default lifetime (Anthropic 5 minutes)
--   cache_write_1h_price  input written to the cache for one hour (Anthropic)
alter table models
  add column cached_input_price bigint check (cached_input_price >= 0),
  add column cache_write_price bigint check (cache_write_price >= 0),
  add column cache_write_1h_price bigint check (cache_write_1h_price >= 0);
