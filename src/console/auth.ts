import { randomBytes } from 'node:crypto';
import { verify } from '@node-rs/argon2';
import { createId } from '@paralleldrive/cuid2';
import { Secret, TOTP } from 'otpauth';
import type pg from 'pg';
import { type DbClient, withTransaction } from '../db/pool.ts';
import { hashPassword, normalizeEmail, validEmail } from '../portal/auth.ts';
import { sessionStore, sha256 } from '../web/sessions.ts';

// Operator accounts of the console: a password (argon2id, as the portal's) and a TOTP code (RFC
// 6238: SHA-1, 6 digits, 30 s, one step of drift either way, each step good once), or one of ten
// recovery codes (each good once). Creation makes all three and returns them once; only hashes of
// the password and the recovery codes are kept.

export const ISSUER = 'catraca console';
export const MIN_OPERATOR_PASSWORD = 12;
export const RECOVERY_CODES = 10;
/** Sign-in throttle: failed (or in-flight) attempts within the window, per e-mail and per client address. */
export const OPERATOR_LOGIN_WINDOW_MIN = 15;
export const OPERATOR_LOGIN_MAX_PER_EMAIL = 5;
export const OPERATOR_LOGIN_MAX_PER_IP = 20;
// Advisory lock namespaces (see src/portal/auth.ts for the portal's): e-mail first, then address.
const LOCK_OPERATOR_EMAIL = 7261201;
const LOCK_OPERATOR_IP = 7261202;

/** An operator's session: 12 hours at most, 15 minutes without a request ends it. */
export const operatorSessions = sessionStore({
  table: 'operator_sessions',
  subject: 'operator_id',
  ttlMs: 12 * 3600 * 1000,
  idleMs: 15 * 60 * 1000,
  touchMs: 60 * 1000,
});

export interface Operator {
  id: string;
  email: string;
  created_at: Date;
  created_by: string | null;
  disabled_at: Date | null;
}

/** What a new (or reset) operator is shown once. */
export interface OperatorSetup {
  operator: Operator;
  password: string;
  totpSecret: string;
  otpauthUrl: string;
  recoveryCodes: string[];
}

export const totpFor = (secret: string, email: string) =>
  new TOTP({ issuer: ISSUER, label: email, algorithm: 'SHA1', digits: 6, period: 30, secret: Secret.fromBase32(secret) });

/** 20 characters of base64url: 120 bits. */
export const generatePassword = () => randomBytes(15).toString('base64url');

/** xxxx-xxxx-xxxx of lower-case base32 (60 bits each). */
export function generateRecoveryCodes(n = RECOVERY_CODES): string[] {
  return Array.from({ length: n }, () =>
    new Secret({ size: 8 }).base32
      .toLowerCase()
      .slice(0, 12)
      .replace(/(.{4})(?=.)/g, '$1-'),
  );
}
/** A recovery code as typed (any case, with or without dashes and spaces) → the form that is hashed. */
export const normalizeRecoveryCode = (code: string) =>
  String(code ?? '')
    .toLowerCase()
    .replace(/[\s-]/g, '');
const recoveryHash = (code: string) => sha256(`catraca-operator-recovery:${normalizeRecoveryCode(code)}`);

async function credentials(password?: string): Promise<{ password: string; passwordHash: string; totpSecret: string; recoveryCodes: string[] }> {
  const pw = password ?? generatePassword();
  return { password: pw, passwordHash: await hashPassword(pw), totpSecret: new Secret({ size: 20 }).base32, recoveryCodes: generateRecoveryCodes() };
}

export type CreateOperatorError = 'bad_email' | 'taken' | 'weak_password';

/** A new operator with a password (given, or generated), a TOTP secret and recovery codes: returned once. */
export async function createOperator(
  db: pg.Pool,
  a: { email: string; createdBy: string | null; password?: string },
): Promise<{ ok: true; setup: OperatorSetup } | { ok: false; error: CreateOperatorError }> {
  const email = normalizeEmail(a.email);
  if (!validEmail(email)) return { ok: false, error: 'bad_email' };
  if (a.password !== undefined && (a.password.length < MIN_OPERATOR_PASSWORD || a.password.length > 1024)) return { ok: false, error: 'weak_password' };
  const c = await credentials(a.password);
  try {
    const operator = await withTransaction(db, async (tx) => {
      const { rows } = await tx.query(
        `insert into operators (id, email, password_hash, totp_secret, created_by) values ($1, $2, $3, $4, $5)
         returning id, email, created_at, created_by, disabled_at`,
        [`opr_${createId()}`, email, c.passwordHash, c.totpSecret, a.createdBy],
      );
      await insertRecoveryCodes(tx, rows[0].id, c.recoveryCodes);
      return rows[0] as Operator;
    });
    return { ok: true, setup: setupOf(operator, c) };
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return { ok: false, error: 'taken' };
    throw err;
  }
}

/** New password, TOTP secret and recovery codes for an operator who lost them (the CLI's `operator reset`); every session ends. */
export async function resetOperator(db: pg.Pool, emailText: string, password?: string): Promise<OperatorSetup | null> {
  const email = normalizeEmail(emailText);
  const c = await credentials(password);
  return withTransaction(db, async (tx) => {
    const { rows } = await tx.query(
      `update operators set password_hash = $2, totp_secret = $3, totp_last_step = 0, disabled_at = null where email = $1
       returning id, email, created_at, created_by, disabled_at`,
      [email, c.passwordHash, c.totpSecret],
    );
    if (!rows[0]) return null;
    await tx.query('delete from operator_recovery_codes where operator_id = $1', [rows[0].id]);
    await insertRecoveryCodes(tx, rows[0].id, c.recoveryCodes);
    await operatorSessions.destroyAllOf(tx, rows[0].id);
    return setupOf(rows[0], c);
  });
}

async function insertRecoveryCodes(tx: DbClient, operatorId: string, codes: string[]): Promise<void> {
  await tx.query('insert into operator_recovery_codes (operator_id, code_hash) select $1, unnest($2::bytea[])', [operatorId, codes.map(recoveryHash)]);
}

function setupOf(operator: Operator, c: { password: string; totpSecret: string; recoveryCodes: string[] }): OperatorSetup {
  return {
    operator,
    password: c.password,
    totpSecret: c.totpSecret,
    otpauthUrl: totpFor(c.totpSecret, operator.email).toString(),
    recoveryCodes: c.recoveryCodes,
  };
}

/** Disables an operator (they can no longer sign in; their sessions end). False: no such operator. */
export async function disableOperator(db: pg.Pool, id: string): Promise<boolean> {
  return withTransaction(db, async (tx) => {
    const { rowCount } = await tx.query('update operators set disabled_at = coalesce(disabled_at, now()) where id = $1', [id]);
    await operatorSessions.destroyAllOf(tx, id);
    return (rowCount ?? 0) > 0;
  });
}

export async function getOperator(db: DbClient, id: string): Promise<Operator | null> {
  const { rows } = await db.query('select id, email, created_at, created_by, disabled_at from operators where id = $1', [id]);
  return rows[0] ?? null;
}

export async function listOperators(db: DbClient): Promise<Operator[]> {
  const { rows } = await db.query('select id, email, created_at, created_by, disabled_at from operators order by created_at, id');
  return rows;
}

export type SignInResult =
  | { ok: true; operator: Operator; recoveryCodesLeft: number | null }
  | { ok: false; error: 'rate_limited'; minutes: number }
  | { ok: false; error: 'bad_credentials'; failed: 'password' | 'code'; operator: Operator | null };

/**
 * Counts and records one attempt (before anything is checked, under advisory locks on the e-mail
 * and the address), so that parallel guesses see each other: at most OPERATOR_LOGIN_MAX_PER_EMAIL
 * per e-mail and OPERATOR_LOGIN_MAX_PER_IP per address are checked in a window.
 */
async function reserveAttempt(db: pg.Pool, email: string, ip: string): Promise<boolean> {
  return withTransaction(db, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_OPERATOR_EMAIL, email]);
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_OPERATOR_IP, ip]);
    const { rows } = await c.query(
      `select count(*) filter (where email = $1)::int as by_email, count(*) filter (where ip = $2)::int as by_ip
         from operator_login_failures where created_at > now() - make_interval(mins => $3) and (email = $1 or ip = $2)`,
      [email, ip, OPERATOR_LOGIN_WINDOW_MIN],
    );
    if (rows[0].by_email >= OPERATOR_LOGIN_MAX_PER_EMAIL || rows[0].by_ip >= OPERATOR_LOGIN_MAX_PER_IP) return false;
    await c.query('insert into operator_login_failures (email, ip) values ($1, $2)', [email, ip]);
    return true;
  });
}

let dummyHash: Promise<string> | null = null;

/** Password and code (TOTP, or a recovery code) in one step; whichever is wrong, the answer is the same. */
export async function signIn(db: pg.Pool, a: { email: string; password: string; code: string; ip: string; now?: number }): Promise<SignInResult> {
  const email = normalizeEmail(a.email).slice(0, 254);
  if (!(await reserveAttempt(db, email, a.ip))) return { ok: false, error: 'rate_limited', minutes: OPERATOR_LOGIN_WINDOW_MIN };
  const { rows } = await db.query(
    'select id, email, created_at, created_by, disabled_at, password_hash, totp_secret from operators where email = $1 and disabled_at is null',
    [email],
  );
  const row = rows[0];
  const pw = String(a.password ?? '').slice(0, 1024);
  dummyHash ??= hashPassword(randomBytes(16).toString('hex'));
  const passwordOk = row ? await verify(row.password_hash, pw).catch(() => false) : (await verify(await dummyHash, pw).catch(() => false)) && false;
  const { password_hash: _h, totp_secret: secret, ...operator } = row ?? {};
  if (!passwordOk) return { ok: false, error: 'bad_credentials', failed: 'password', operator: row ? (operator as Operator) : null };
  const code = String(a.code ?? '').trim();
  let recoveryCodesLeft: number | null = null;
  if (/^\d{6}$/.test(code)) {
    if (!(await acceptTotp(db, row.id, secret, row.email, code, a.now ?? Date.now())))
      return { ok: false, error: 'bad_credentials', failed: 'code', operator: operator as Operator };
  } else {
    recoveryCodesLeft = await useRecoveryCode(db, row.id, code);
    if (recoveryCodesLeft === null) return { ok: false, error: 'bad_credentials', failed: 'code', operator: operator as Operator };
  }
  await db.query('delete from operator_login_failures where email = $1 and ip = $2', [email, a.ip]);
  return { ok: true, operator: operator as Operator, recoveryCodesLeft };
}

/** A TOTP code of the current step or one either side, of a later step than any accepted before (a code works once). */
async function acceptTotp(db: pg.Pool, operatorId: string, secret: string, email: string, code: string, now: number): Promise<boolean> {
  const delta = totpFor(secret, email).validate({ token: code, timestamp: now, window: 1 });
  if (delta === null) return false;
  const step = Math.floor(now / 30000) + delta;
  const { rowCount } = await db.query('update operators set totp_last_step = $2 where id = $1 and totp_last_step < $2', [operatorId, step]);
  return (rowCount ?? 0) > 0;
}

/** Uses a recovery code (once); the number left, or null when it is not one of the operator's unused codes. */
async function useRecoveryCode(db: pg.Pool, operatorId: string, code: string): Promise<number | null> {
  if (normalizeRecoveryCode(code).length !== 12) return null;
  const { rowCount } = await db.query('update operator_recovery_codes set used_at = now() where operator_id = $1 and code_hash = $2 and used_at is null', [
    operatorId,
    recoveryHash(code),
  ]);
  if (!rowCount) return null;
  const { rows } = await db.query('select count(*)::int as n from operator_recovery_codes where operator_id = $1 and used_at is null', [operatorId]);
  return rows[0].n;
}
