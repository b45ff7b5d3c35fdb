-- Billing profiles (issue 28): for whom a tenant's notas fiscais are made — the portal's page
-- "Dados fiscais". Append-only: each save is a new row valid from its time, so a note uses the
-- profile as it was when its DPS was made (invoices.profile_id) and the history stays.
--   document       the CPF (11 digits) or CNPJ (14 characters, alphanumeric from July 2026), check
--                  digits verified by src/nfse/document.ts before it gets here
create table billing_profiles (
  id                     bigserial primary key,
  tenant_id              text not null references tenants(id),
  document_kind          text not null check (document_kind in ('cpf', 'cnpj')),
  document               text not null check ((document_kind = 'cpf' and document ~ '^[0-9]{11}$') or (document_kind = 'cnpj' and document ~ '^[0-9A-Z]{12}[0-9]{2}$')),
  name                   text not null check (length(name) between 1 and 300),
  email                  text check (email is null or length(email) between 3 and 80),
  cep                    text not null check (cep ~ '^[0-9]{8}$'),
  street                 text not null check (length(street) between 1 and 255),
  number                 text not null check (length(number) between 1 and 60),
  complement             text check (complement is null or length(complement) between 1 and 156),
  district               text not null check (length(district) between 1 and 60),
  city_code              text not null check (city_code ~ '^[0-9]{7}$'),
  uf                     text not null check (uf ~ '^[A-Z]{2}$'),
  municipal_registration text check (municipal_registration is null or length(municipal_registration) between 1 and 15),
  saved_by               text,
  valid_from             timestamptz not null default now()
);
create index billing_profiles_tenant on billing_profiles (tenant_id, valid_from desc, id desc);

grant select, insert on billing_profiles to catraca_portal;
grant usage on sequence billing_profiles_id_seq to catraca_portal;
grant select on billing_profiles to catraca_console, catraca_admin;
