-- Portal hardening (issue 22): e-mail addresses verified by a link before the first top-up, and
-- the indexes the periodic cleanup deletes by (src/portal/cleanup.ts).

-- Null until the address is verified. Accounts from before verification existed are not asked again.
alter table portal_users add column email_verified_at timestamptz;
update portal_users set email_verified_at = created_at;

-- One-time links sent by e-mail: `verify` (the address) and `reset` (a new password, which also
-- proves the address). id is the SHA-256 of the random token in the link: the table alone opens
-- nothing. `email` is the address the link was sent to; used_at makes it single use.
create table portal_email_tokens (
  id         bytea primary key,
  user_id    text not null references portal_users(id) on delete cascade,
  purpose    text not null check (purpose in ('verify', 'reset')),
  email      text not null,
  expires_at timestamptz not null,
  used_at    timestamptz,
  created_at timestamptz not null default now()
);
create index portal_email_tokens_user on portal_email_tokens (user_id, created_at);
create index portal_email_tokens_expires on portal_email_tokens (expires_at);

create index portal_login_failures_time on portal_login_failures (created_at);
create index portal_signup_attempts_time on portal_signup_attempts (created_at);
create index portal_flash_time on portal_flash (created_at);
