-- What a model accepts and how much one request can cost at most (issue: worst-case holds).
--   protocol           the wire format its workers speak (no longer guessed from the pool name)
--   input_modalities   content-part kinds the model accepts; any other part is refused with a 400
--   image_input_tokens most prompt tokens the vendor bills for one image (null: the whole context)
--   extra_params       request fields beyond the protocol's documented ones that this upstream
--                      accepts and that are forwarded to it (e.g. vLLM's top_k); anything else
--                      unknown is refused
alter table models
  add column protocol text not null default 'openai' check (protocol in ('sim', 'openai', 'anthropic')),
  add column input_modalities text[] not null default '{text}'
    check (input_modalities <@ array['text', 'image', 'audio', 'file']::text[] and 'text' = any(input_modalities)),
  add column image_input_tokens integer check (image_input_tokens > 0),
  add column extra_params text[] not null default '{}';

update models set protocol = 'sim' where pool = 'sim';
update models set protocol = 'anthropic' where pool = 'anthropic';
