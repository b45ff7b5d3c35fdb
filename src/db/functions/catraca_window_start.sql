-- Start of the key-limit window that contains `at` (UTC boundaries, weeks start on Monday).
create or replace function catraca_window_start(reset text, at timestamptz) returns timestamptz
language sql immutable as $$
  select case reset
    when 'daily'   then date_trunc('day',   at at time zone 'UTC') at time zone 'UTC'
    when 'weekly'  then date_trunc('week',  at at time zone 'UTC') at time zone 'UTC'
    when 'monthly' then date_trunc('month', at at time zone 'UTC') at time zone 'UTC'
    else '-infinity'::timestamptz
  end
$$;
revoke all on function catraca_window_start(text, timestamptz) from public;
grant execute on function catraca_window_start(text, timestamptz) to catraca_gateway, catraca_portal, catraca_admin;
