-- catraca schema. Money: bigint micro-BRL (1e-6 BRL). Prices: bigint micro-BRL per 1M tokens.

create table tenants (
  id             text primary key,
  name           text not null,
  balance_micros bigint not null default 0 check (balance_micros >= 0),
  held_micros    bigint not null default 0 check (held_micros >= 0),
  created_at     timestamptz not null default now(),
  constraint held_within_balance check (held_micros <= balance_micros)
);

create table api_keys (
  id                    text primary key,
  tenant_id             text not null references tenants(id),
  key_hash              bytea not null unique,
  key_hint              text not null,
  label                 text not null default '',
  models                text[],            -- null means every model ('*')
  limit_micros          bigint check (limit_micros >= 0),
  limit_reset           text check (limit_reset in ('daily', 'weekly', 'monthly')),
  held_micros           bigint not null default 0 check (held_micros >= 0),
  usage_micros          bigint not null default 0,
  window_start          timestamptz,
  window_usage_micros   bigint not null default 0,
  rate_limit_requests   integer,
  rate_limit_interval_s integer,
  rl_window_start       timestamptz,          -- current fixed rate-limit window
  rl_count              integer not null default 0,
  is_demo               boolean not null default false,
  created_at            timestamptz not null default now(),
  last_used_at          timestamptz,
  expires_at            timestamptz,
  revoked_at            timestamptz
);
create index api_keys_tenant on api_keys (tenant_id);

create table models (
  id                text primary key,           -- <vendor>/<model_name>
  pool              text not null,
  upstream_model    text not null,
  base_url          text,
  api_key_env       text,                       -- name of the env var holding the upstream key; never the key
  input_price       bigint not null check (input_price >= 0),   -- micro-BRL per 1M tokens
  output_price      bigint not null check (output_price >= 0),
  context_length    integer not null default 128000,
  max_output_tokens integer not null default 4096,
  name              text,
  description       text,
  created_at        timestamptz not null default now(),
  updated_at        timestamptz not null default now()
);

create table holds (
  request_id    text primary key,
  tenant_id     text not null references tenants(id),
  key_id        text not null references api_keys(id),
  amount_micros bigint not null check (amount_micros >= 0),
  created_at    timestamptz not null default now(),
  expires_at    timestamptz not null
);
create index holds_expires on holds (expires_at);

-- Append-only. balance = sum(credits) - sum(debits), checked by `catraca ledger check`.
create table ledger (
  id                   bigserial primary key,
  tenant_id            text not null references tenants(id),
  kind                 text not null check (kind in ('credit', 'debit')),
  amount_micros        bigint not null check (amount_micros >= 0),
  balance_after_micros bigint not null,
  source               text not null,       -- 'request' | 'grant' | 'pix' | 'pix_refund' | ...
  request_id           text unique,         -- debits: exactly one per request
  external_id          text unique,         -- credits: e.g. Pix endToEndId, exactly once
  key_id               text,
  model                text,
  input_tokens         integer,
  output_tokens        integer,
  cost_micros          bigint,              -- computed cost; differs from amount only on a shortfall
  estimated            boolean not null default false,
  outcome              text,                -- 'completed' | 'cancelled' | 'error'
  note                 text,
  created_at           timestamptz not null default now()
);
create index ledger_tenant_time on ledger (tenant_id, created_at);
create index ledger_key_time on ledger (key_id, created_at) where key_id is not null;

create rule ledger_no_update as on update to ledger do instead nothing;
create rule ledger_no_delete as on delete to ledger do instead nothing;

-- Start of the key-limit window that contains `at` (UTC boundaries, weeks start on Monday).
create function catraca_window_start(reset text, at timestamptz) returns timestamptz
language sql immutable as $$
  select case reset
    when 'daily'   then date_trunc('day',   at at time zone 'UTC') at time zone 'UTC'
    when 'weekly'  then date_trunc('week',  at at time zone 'UTC') at time zone 'UTC'
    when 'monthly' then date_trunc('month', at at time zone 'UTC') at time zone 'UTC'
    else '-infinity'::timestamptz
  end
$$;

-- Admission: reserve between p_min and p_max micros against the tenant's available balance
-- (balance - holds), the key's remaining limit and the key's request rate limit (fixed windows
-- aligned to multiples of the interval since the epoch), atomically. Rows are locked key first,
-- then tenant; see the lock-order note below.
create function catraca_admit(p_request_id text, p_tenant text, p_key text, p_min bigint, p_max bigint, p_ttl_ms bigint)
returns table (status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql as $$
declare
  k api_keys%rowtype;
  v_balance_avail bigint;
  v_key_avail bigint;
  v_win timestamptz;
  v_amount bigint;
  v_rl_start timestamptz;
  v_rl_count integer;
  v_rl_reset bigint;
begin
  select * into k from api_keys where id = p_key for update;
  if not found or k.revoked_at is not null then
    return query select 'key_revoked'::text, 0::bigint, 0::bigint, null::integer, null::integer, null::bigint; return;
  end if;

  if k.rate_limit_requests is not null and k.rate_limit_interval_s is not null then
    v_rl_start := to_timestamp(floor(extract(epoch from clock_timestamp()) / k.rate_limit_interval_s) * k.rate_limit_interval_s);
    v_rl_count := case when k.rl_window_start = v_rl_start then k.rl_count else 0 end;
    v_rl_reset := ceil(extract(epoch from (v_rl_start + make_interval(secs => k.rate_limit_interval_s) - clock_timestamp())) * 1000)::bigint;
    if v_rl_count >= k.rate_limit_requests then
      return query select 'rate_limited'::text, 0::bigint, 0::bigint, k.rate_limit_requests, 0, v_rl_reset; return;
    end if;
    v_rl_count := v_rl_count + 1;
    update api_keys set rl_window_start = v_rl_start, rl_count = v_rl_count where id = p_key;
  end if;

  select t.balance_micros - t.held_micros into v_balance_avail from tenants t where t.id = p_tenant for update;
  if k.limit_micros is not null then
    v_win := catraca_window_start(k.limit_reset, now());
    v_key_avail := k.limit_micros - k.held_micros - case
      when k.limit_reset is null then k.usage_micros
      when k.window_start = v_win then k.window_usage_micros
      else 0 end;
    if v_key_avail < p_min and v_key_avail < v_balance_avail then
      return query select 'key_limit'::text, 0::bigint, greatest(v_key_avail, 0), k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset; return;
    end if;
  end if;
  if v_balance_avail < p_min then
    return query select 'insufficient_balance'::text, 0::bigint, v_balance_avail, k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset; return;
  end if;
  v_amount := least(p_max, v_balance_avail, coalesce(v_key_avail, p_max));
  update tenants set held_micros = held_micros + v_amount where id = p_tenant;
  update api_keys set held_micros = held_micros + v_amount, last_used_at = now() where id = p_key;
  insert into holds (request_id, tenant_id, key_id, amount_micros, expires_at)
    values (p_request_id, p_tenant, p_key, v_amount, now() + make_interval(secs => p_ttl_ms / 1000.0));
  return query select 'ok'::text, v_amount, least(v_balance_avail, coalesce(v_key_avail, v_balance_avail)),
    k.rate_limit_requests, k.rate_limit_requests - v_rl_count, v_rl_reset;
end $$;

-- Settlement: exactly once per request id. Debits the cost (never below zero: a cost above what
-- the balance can pay is recorded as a shortfall), releases the request's hold if still open.
create function catraca_settle(
  p_request_id text, p_tenant text, p_key text, p_cost bigint, p_model text,
  p_input integer, p_output integer, p_estimated boolean, p_outcome text, p_at timestamptz)
returns table (status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  v_hold bigint;
  v_balance bigint;
  v_held bigint;
  v_debit bigint;
  v_win timestamptz;
  v_limit_reset text;
begin
  select limit_reset into v_limit_reset from api_keys where id = p_key for update;
  select t.balance_micros, t.held_micros into v_balance, v_held from tenants t where t.id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint, 0::bigint; return;
  end if;
  if exists (select 1 from ledger where request_id = p_request_id) then
    return query select 'duplicate'::text, 0::bigint, v_balance; return;
  end if;
  delete from holds where request_id = p_request_id returning amount_micros into v_hold;
  v_hold := coalesce(v_hold, 0);
  v_debit := least(p_cost, v_balance - (v_held - v_hold));
  update tenants set balance_micros = balance_micros - v_debit, held_micros = held_micros - v_hold
    where id = p_tenant returning balance_micros into v_balance;
  v_win := catraca_window_start(v_limit_reset, p_at);
  update api_keys set
      held_micros = held_micros - v_hold,
      usage_micros = usage_micros + v_debit,
      window_usage_micros = case when window_start = v_win then window_usage_micros + v_debit else v_debit end,
      window_start = v_win
    where id = p_key;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model,
                      input_tokens, output_tokens, cost_micros, estimated, outcome, note, created_at)
    values (p_tenant, 'debit', v_debit, v_balance, 'request', p_request_id, p_key, p_model,
            p_input, p_output, p_cost, p_estimated, p_outcome,
            case when v_debit < p_cost then 'shortfall: cost exceeded the available balance' end, p_at);
  return query select 'settled'::text, v_debit, v_balance;
end $$;

-- Releases holds whose request never settled (its worker died before publishing usage).
create function catraca_sweep_holds(p_limit integer) returns integer
language plpgsql as $$
declare
  h holds%rowtype;
  n integer := 0;
  v_ids text[];
begin
  select array_agg(request_id) into v_ids from (select request_id from holds where expires_at < now() order by expires_at limit p_limit) e;
  if v_ids is null then return 0; end if;
  perform 1 from api_keys where id in (select key_id from holds where request_id = any(v_ids)) order by id for update;
  perform 1 from tenants where id in (select tenant_id from holds where request_id = any(v_ids)) order by id for update;
  for h in delete from holds where request_id = any(v_ids) and expires_at < now() returning * loop
    update tenants set held_micros = held_micros - h.amount_micros where id = h.tenant_id;
    update api_keys set held_micros = held_micros - h.amount_micros where id = h.key_id;
    n := n + 1;
  end loop;
  return n;
end $$;

-- Credit (grant, Pix): exactly once per external id when one is given.
create function catraca_credit(p_tenant text, p_amount bigint, p_source text, p_external_id text, p_note text)
returns table (status text, balance bigint)
language plpgsql as $$
declare v_balance bigint;
begin
  if p_amount <= 0 then raise exception 'credit amount must be positive'; end if;
  select balance_micros into v_balance from tenants where id = p_tenant for update;
  if not found then
    return query select 'unknown_tenant'::text, 0::bigint; return;
  end if;
  if p_external_id is not null and exists (select 1 from ledger where external_id = p_external_id) then
    return query select 'duplicate'::text, v_balance; return;
  end if;
  update tenants set balance_micros = balance_micros + p_amount where id = p_tenant returning balance_micros into v_balance;
  insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, note)
    values (p_tenant, 'credit', p_amount, v_balance, p_source, p_external_id, p_note);
  return query select 'credited'::text, v_balance;
end $$;

-- Releases one hold without a debit (the job never reached a worker). Same lock order.
create function catraca_release(p_request_id text) returns bigint
language plpgsql as $$
declare h holds%rowtype;
begin
  select * into h from holds where request_id = p_request_id;
  if not found then return 0; end if;
  perform 1 from api_keys where id = h.key_id for update;
  perform 1 from tenants where id = h.tenant_id for update;
  delete from holds where request_id = p_request_id;
  if not found then return 0; end if;
  update tenants set held_micros = held_micros - h.amount_micros where id = h.tenant_id;
  update api_keys set held_micros = held_micros - h.amount_micros where id = h.key_id;
  return h.amount_micros;
end $$;

-- Global lock order for every function that touches several accounts: all key rows (sorted by
-- id), then all tenant rows (sorted by id). Single-row admissions/settlements (one key, then its
-- tenant) follow it trivially, so no two catraca transactions can deadlock.

-- Many admissions of one tenant in one transaction (the front door coalesces the requests of a
-- hot tenant that arrive while its previous admission call is in flight). Lock order stays
-- "keys before tenant": every key of the batch first, in sorted order, then catraca_admit per item
-- re-enters locks this transaction already holds. Results come back in the items' order.
create function catraca_admit_batch(p_items jsonb, p_ttl_ms bigint)
returns table (request_id text, status text, held bigint, available bigint, rl_limit integer, rl_remaining integer, rl_reset_ms bigint)
language plpgsql as $$
declare
  item record;
begin
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  for item in
    select x.request_id, x.tenant_id, x.key_id, x.min::bigint as min, x.max::bigint as max, x.ord
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, min text, max text))
           with ordinality as x(request_id, tenant_id, key_id, min, max, ord)
     order by x.ord
  loop
    return query select item.request_id, a.status, a.held, a.available, a.rl_limit, a.rl_remaining, a.rl_reset_ms
      from catraca_admit(item.request_id, item.tenant_id, item.key_id, item.min, item.max, p_ttl_ms) a;
  end loop;
end $$;

-- Settles many usage messages in one transaction: one WAL flush for the whole batch. Each item is
-- still exactly-once on its own (catraca_settle's ledger check and unique request id).
create function catraca_settle_batch(p_items jsonb)
returns table (request_id text, status text, debited bigint, balance bigint)
language plpgsql as $$
declare
  item record;
begin
  perform 1 from api_keys where id in (select distinct x.key_id from jsonb_to_recordset(p_items) as x(key_id text)) order by id for update;
  perform 1 from tenants where id in (select distinct x.tenant_id from jsonb_to_recordset(p_items) as x(tenant_id text)) order by id for update;
  for item in
    select x.*
      from rows from (jsonb_to_recordset(p_items) as (request_id text, tenant_id text, key_id text, cost text, model text,
                      input integer, output integer, estimated boolean, outcome text, at timestamptz))
           with ordinality as x(request_id, tenant_id, key_id, cost, model, input, output, estimated, outcome, at, ord)
     order by x.ord
  loop
    return query select item.request_id, s.status, s.debited, s.balance
      from catraca_settle(item.request_id, item.tenant_id, item.key_id, item.cost::bigint, item.model,
                          item.input, item.output, item.estimated, item.outcome, item.at) s;
  end loop;
end $$;
