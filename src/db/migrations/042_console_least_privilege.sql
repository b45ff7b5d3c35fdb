-- The operator's console, narrowed (an audit of issue 21's console):
--   sign-in throttle  a failure row says which check failed: 'password' (counted per e-mail and
--                     address pair, with a backoff for the e-mail as a whole) or 'code' (a wrong
--                     TOTP or recovery code after a correct password, counted per operator), so a
--                     stranger who knows an operator's e-mail can no longer lock the operator out;
--   catalog           catraca_console may change a model's sale prices, nothing else of it (no new
--                     model, no upstream, pool or key variable);
--   operators         disabling goes through catraca_console_disable_operator: the console can no
--                     longer clear disabled_at (re-enable an operator) nor set the columns of a new
--                     operator that the console never sets;
--   keys              revoking goes through catraca_console_revoke_key (revocation, key.revoked
--                     and the audit row in one transaction);
--   audit log         rows are written only through catraca_console_audit (and the SECURITY
--                     DEFINER functions that move money or change state): no row with a chosen
--                     time, id or unknown action.
-- The functions are in src/db/functions/catraca_console_*.sql, with their own grants.

alter table operator_login_failures add column kind text not null default 'password' check (kind in ('password', 'code'));
create index operator_login_failures_ip_email on operator_login_failures (ip, email, created_at);

grant update (kind) on operator_login_failures to catraca_console;

revoke insert, update on models from catraca_console;
grant update (input_price, cached_input_price, output_price, updated_at) on models to catraca_console;

revoke insert, update on operators from catraca_console;
grant insert (id, email, password_hash, totp_secret, created_by) on operators to catraca_console;
grant update (totp_last_step) on operators to catraca_console;

revoke update on api_keys from catraca_console;

revoke insert on console_audit from catraca_console;
revoke usage on sequence console_audit_id_seq from catraca_console;
