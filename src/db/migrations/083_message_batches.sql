-- Anthropic's Message Batches API (issue 30; docs/batch.md "Anthropic Message Batches") over the
-- same core as OpenAI's batches: a row of `batches` with api 'anthropic' (endpoint /v1/messages),
-- its inline requests kept as a `message_batch` file of the tenant's (never listed by /v1/files),
-- its results read from batch_results. DELETE /v1/messages/batches/{id} removes an ended batch.
alter table batches add column api text not null default 'openai' check (api in ('openai', 'anthropic'));

alter table batch_files drop constraint batch_files_purpose_check;
alter table batch_files add constraint batch_files_purpose_check check (purpose in ('batch', 'batch_output', 'message_batch'));

grant delete on batches, batch_results to catraca_gateway;
