-- When the portal's Pix reconciler last ran and what it found (one row, written at the end of each
-- pass by src/pix/service.ts): the console shows it beside the charges.
create table pix_reconciler_status (
  name        text primary key,
  last_run_at timestamptz not null,
  checked     integer not null,
  failed      integer not null
);

grant select, insert, update on pix_reconciler_status to catraca_portal;
grant select on pix_reconciler_status to catraca_console, catraca_admin;
