-- The trigger of console_audit (migrations/039_console.sql): the operators' audit log is
-- append-only, for every role the database has, its owner and superusers included.
create or replace function catraca_console_audit_append_only() returns trigger
language plpgsql as $$
begin
  raise exception 'console_audit is append-only: % refused', tg_op using errcode = '42501';
end $$;
revoke all on function catraca_console_audit_append_only() from public;
