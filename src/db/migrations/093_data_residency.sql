-- Data kept in a country, on request. A deployment says where it runs (`model deployment add …
-- --region R --country BR`: the vendor's region name; ISO 3166-1 alpha-2); a key may be restricted
-- to deployments in one country (`key create … --data-country BR`): its requests go only to those
-- deployments, fall back only among them, and are refused (403) when none is available.
alter table model_deployments
  add column region text check (region ~ '^[a-z0-9][a-z0-9-]{0,39}$'),
  add column country text check (country ~ '^[A-Z]{2}$');
alter table api_keys add column data_country text check (data_country ~ '^[A-Z]{2}$');
-- the roles that create keys (src/db/keys.ts createApiKey) write the new column too
grant insert (data_country) on api_keys to catraca_portal, catraca_admin;
