-- A stored response (src/protocols/responses/store.ts) is inserted by the front door when the answer
-- ends, outside admission's lock order (api_keys, then tenants, FOR UPDATE). Its foreign keys made
-- each insert take FOR KEY SHARE locks on the tenant's and the key's rows, in the constraints'
-- order, and a burst of stored responses of one key deadlocked with the admissions running beside
-- it ("deadlock detected" on api_keys; the response was then not stored and its GET a 404). The
-- tenant and key ids are the request's own, checked by admission; tenants and keys are never
-- deleted while they have requests (the ledger's rows keep them), and a response row goes with
-- its expiry, so the constraints only cost locks.
alter table responses drop constraint responses_tenant_id_fkey, drop constraint responses_key_id_fkey;
