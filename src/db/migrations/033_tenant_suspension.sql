-- A tenant whose admission is suspended: no request of any of its keys is admitted (403
-- tenant_suspended) until an operator reactivates it. Set by metering when a settlement could not
-- debit in full (a shortfall: something was held too little), or by an operator.
alter table tenants
  add column suspended_at timestamptz,
  add column suspended_reason text;

-- Whether the operator gave the model's context length (`model set --context-length`). The prompt
-- bound of a request is capped at the context length only when it was given: a default of 128 000
-- on a model that takes a million tokens would hold an eighth of what the vendor can bill.
alter table models add column context_length_set boolean not null default false;
