-- Portal security (issue 8): sign-up throttle per client address, session idle timeout, one-time
-- flashes for Post/Redirect/Get. (The login throttle keeps using portal_login_failures, but an
-- attempt is now inserted BEFORE the password is checked, under advisory locks, so parallel
-- attempts count against each other; a successful sign-in deletes the e-mail's rows.)

-- Sign-up attempts (well-formed forms that reached password hashing), by client address.
create table portal_signup_attempts (
  id         bigserial primary key,
  ip         text not null,
  created_at timestamptz not null default now()
);
create index portal_signup_attempts_ip on portal_signup_attempts (ip, created_at);

-- Sessions expire after 30 minutes without a request (sliding; last_seen_at is written at most
-- once a minute), besides their absolute expires_at.
alter table portal_sessions add column last_seen_at timestamptz not null default now();

-- One-time messages of a session (Post/Redirect/Get): the new API key is stored here between the
-- POST that creates it and the GET that shows it, then deleted by that GET. The payload is
-- AES-256-GCM under a key derived from the session's cookie token, which is never stored: a read
-- of this table alone does not reveal the key. Rows older than 10 minutes are never shown.
create table portal_flash (
  id         text primary key,
  session_id bytea not null references portal_sessions(id) on delete cascade,
  payload    bytea not null,
  created_at timestamptz not null default now()
);
create index portal_flash_session on portal_flash (session_id);
