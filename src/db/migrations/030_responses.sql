-- Responses stored by POST /v1/responses (`store`, OpenAI's default true) for previous_response_id
-- and GET/DELETE /v1/responses/{id}, per tenant, until expires_at (RESPONSES_RETENTION_DAYS);
-- metering's sweeper deletes expired rows (src/protocols/responses/store.ts).
--   id           resp_… (derived from request_id: /v1/generation takes either)
--   input_items  the whole conversation the response answered (a previous response's input and
--                output, then this request's input), as Responses items with ids
--   output_items what it answered (Responses items)
--   params       the request's echoed fields (instructions, tools, tool_choice, text, reasoning, …)
create table responses (
  id           text primary key,
  tenant_id    text not null references tenants(id),
  key_id       text not null references api_keys(id),
  model        text not null,
  request_id   text not null,
  input_items  jsonb not null,
  output_items jsonb not null,
  params       jsonb not null,
  usage        jsonb not null,
  status       text not null check (status in ('completed', 'incomplete')),
  created_at   timestamptz not null default now(),
  expires_at   timestamptz not null
);
create index responses_tenant on responses (tenant_id, created_at);
create index responses_expiry on responses (expires_at);
