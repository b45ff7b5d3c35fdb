-- Least privilege (issue 22): what each process's role may do, on top of what the owner
-- (catraca_owner) owns. The roles themselves belong to the cluster: the migration runner creates
-- them (src/db/roles.ts) before running this as catraca_owner. EXECUTE on the catraca_* functions
-- is granted in each function file (src/db/functions/*.sql), next to the function; those that
-- write what their callers may not touch run as the owner (SECURITY DEFINER, fixed search_path).
-- A new table or query needs its grant here, in a new migration: a missing grant is an outage,
-- which test/db/roles.test.ts (each role's real paths) is there to catch.
do $$
declare missing text[];
begin
  select array_agg(r) into missing
    from unnest(array['catraca_owner', 'catraca_gateway', 'catraca_worker', 'catraca_metering', 'catraca_portal', 'catraca_admin']) r
   where not exists (select 1 from pg_roles where rolname = r);
  if missing is not null then
    raise exception 'the roles % do not exist: run the migrations once as a superuser (npm run migrate), which creates them (docs/operations.md, "Least privilege")', missing;
  end if;
end $$;

-- Only catraca's roles connect to the database; nobody creates temporary objects in it.
do $$
begin
  execute format('revoke all on database %I from public', current_database());
  execute format('grant connect on database %I to catraca_owner, catraca_gateway, catraca_worker, catraca_metering, catraca_portal, catraca_admin',
                 current_database());
end $$;

-- Functions are executable by PUBLIC unless revoked: not catraca's, now or later.
revoke all on all functions in schema public from public;
alter default privileges for role catraca_owner in schema public revoke execute on functions from public;

-- The catalog: read by every process that routes or serves requests; written by operators.
grant select on models, model_aliases, model_deployments to catraca_worker, catraca_gateway, catraca_admin;
grant insert, update, delete on models, model_aliases, model_deployments to catraca_admin;

-- Front door: keys by hash, /v1/credits, /v1/key, /v1/generation; stored responses. Holds and
-- balances change only through the admission functions.
grant select on tenants, api_keys, ledger to catraca_gateway;
grant select, insert, delete on responses to catraca_gateway;

-- Metering: settlement and the hold sweeper are functions; the open-holds gauge and the expiry of
-- stored responses are its own statements (`for update skip locked` needs UPDATE on a column).
grant select on holds to catraca_metering;
grant select, delete on responses to catraca_metering;
grant update (expires_at) on responses to catraca_metering;

-- Portal: its own tables; tenants and keys it creates (never a balance, never a key's counters);
-- charges it creates and whose status it follows (paid only through catraca_pix_credit, which
-- alone sets end_to_end_id); refunds it records (debited through catraca_pix_refund); usage reads.
grant select, insert, update, delete on portal_users, portal_sessions, portal_login_failures, portal_signup_attempts, portal_settings, portal_flash,
  portal_email_tokens, pix_webhook_events to catraca_portal;
grant usage on sequence portal_login_failures_id_seq, portal_signup_attempts_id_seq, pix_webhook_events_id_seq to catraca_portal;
grant select on tenants, api_keys, ledger, models to catraca_portal;
grant insert (id, name) on tenants to catraca_portal;
grant insert (id, tenant_id, key_hash, key_hint, label, models, limit_micros, limit_reset, rate_limit_requests, rate_limit_interval_s, expires_at,
              is_demo, max_concurrent, tpm, end_user_daily_limit, created_by) on api_keys to catraca_portal;
grant update (revoked_at) on api_keys to catraca_portal;
grant select, insert (txid, tenant_id, amount_micros, status, provider, br_code, location, expires_at), update (status, checked_at)
  on pix_charges to catraca_portal;
grant select, insert (end_to_end_id, refund_id, txid, tenant_id, amount_micros, status), update (status, debited_micros) on pix_refunds to catraca_portal;

-- Admin CLI: reads for status, lists and `ledger check`; tenants, keys and the catalog it manages;
-- grants through catraca_credit. No portal accounts, no stored prompts.
grant select on tenants, api_keys, holds, ledger, pix_charges, pix_refunds, pix_webhook_events, portal_settings to catraca_admin;
grant insert (id, name) on tenants to catraca_admin;
grant insert (id, tenant_id, key_hash, key_hint, label, models, limit_micros, limit_reset, rate_limit_requests, rate_limit_interval_s, expires_at,
              is_demo, max_concurrent, tpm, end_user_daily_limit, created_by) on api_keys to catraca_admin;
grant update (revoked_at) on api_keys to catraca_admin;
grant update (suspended_at, suspended_reason) on tenants to catraca_admin;
