-- Disables an operator (from the console, or the admin CLI): disabled_at is set (kept if already
-- set), every session of theirs ends, and the audit row (operator_disable, by p_by or the CLI when
-- null, from p_ip) is written, in one transaction. The console's role may not touch disabled_at
-- itself, so it can never re-enable anyone (only `catraca operator reset` does). Returns false when
-- there is no such operator.
create or replace function catraca_console_disable_operator(p_by text, p_ip text, p_target text)
returns boolean
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
  v_before timestamptz;
  v_after timestamptz;
begin
  select disabled_at into v_before from operators where id = p_target for update;
  if not found then return false; end if;
  update operators set disabled_at = coalesce(disabled_at, now()) where id = p_target returning disabled_at into v_after;
  delete from operator_sessions where operator_id = p_target;
  perform catraca_console_audit(p_by, null, 'operator_disable', p_ip, null, p_target, null,
                                jsonb_build_object('disabled_at', v_before), jsonb_build_object('disabled_at', v_after));
  return true;
end $$;
revoke all on function catraca_console_disable_operator(text, text, text) from public;
grant execute on function catraca_console_disable_operator(text, text, text) to catraca_console, catraca_admin;
