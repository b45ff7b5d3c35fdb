-- The APIs agents speak (messages, responses, embeddings, legacy completions):
--   kind                what a model is for: 'chat' (chat completions, messages, responses,
--                       legacy completions) or 'embedding' (/v1/embeddings)
--   legacy_completions  the vendor has its own /completions endpoint (legacy text completions are
--                       forwarded to it; without it they are translated into one user message)
--   model_aliases       other names for a catalog model (the built-in model names agents send,
--                       e.g. Claude Code's claude-sonnet-…): resolved on every route, the key's
--                       allowlist applies to the target
alter table models
  add column kind text not null default 'chat' check (kind in ('chat', 'embedding')),
  add column legacy_completions boolean not null default false;

create table model_aliases (
  alias      text primary key check (length(alias) between 1 and 200),
  model_id   text not null references models (id) on delete cascade,
  created_at timestamptz not null default now()
);
create index model_aliases_model on model_aliases (model_id);
