-- A tenant is a company with several portal users, each with a role (issue 20):
--   owner      everything, members and roles included (a tenant always keeps one)
--   admin      keys (all), members (not owners)
--   billing    top-ups, statement, exports, notifications
--   developer  their own keys, usage
-- Every user before this migration was its tenant's only user: its owner.
alter table portal_users drop constraint portal_users_tenant_id_key;
alter table portal_users add column role text not null default 'owner' check (role in ('owner', 'admin', 'billing', 'developer'));
create index portal_users_tenant on portal_users (tenant_id, role);
