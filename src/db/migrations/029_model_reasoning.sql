-- Models that reason (OpenAI's o-series and gpt-5, Claude with extended thinking, …): OpenRouter's
-- `reasoning` request field is mapped to their reasoning effort or thinking budget. For other
-- models it is accepted and not applied (a vendor would refuse reasoning_effort).
alter table models add column reasoning boolean not null default false;
