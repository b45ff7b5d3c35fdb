import { randomBytes } from 'node:crypto';
import { createId } from '@paralleldrive/cuid2';
import { Secret, TOTP } from 'otpauth';
import type pg from 'pg';
import { type DbClient, withTransaction } from '../db/pool.ts';
import { sessionStore, sha256 } from '../web/sessions.ts';
import { hashPassword, loginThrottle, normalizeEmail, passwordMatches, validEmail } from '../web/sign-in.ts';
import { audit } from './audit.ts';

// Operator accounts of the console: a password (argon2id, as the portal's) and a TOTP code (RFC
// 6238: SHA-1, 6 digits, 30 s, one step of drift either way, each step good once), or one of ten
// recovery codes (each good once). Creation makes all three and returns them once; only hashes of
// the password and the recovery codes are kept.

export const ISSUER = 'catraca console';
export const MIN_OPERATOR_PASSWORD = 12;
export const RECOVERY_CODES = 10;
/**
 * Sign-in throttle, as the portal's (src/web/sign-in.ts), over failed (or in-flight) attempts
 * within OPERATOR_LOGIN_WINDOW_MIN:
 *   wrong passwords  OPERATOR_LOGIN_MAX_PER_PAIR per (e-mail, address) pair lock that pair; the
 *                    e-mail as a whole has OPERATOR_LOGIN_EMAIL_FREE free, then each further attempt
 *                    waits twice as long after the last failure as the one before (1 s, 2 s, 4 s …
 *                    at most OPERATOR_LOGIN_EMAIL_MAX_DELAY_S): wrong passwords from elsewhere never
 *                    lock the operator out of their own address;
 *   wrong codes      (a TOTP or recovery code after a correct password) OPERATOR_LOGIN_MAX_CODE per
 *                    operator lock the operator: only someone who knows the password gets there;
 *   per address      OPERATOR_LOGIN_MAX_PER_IP failures of any kind lock the address.
 */
export const OPERATOR_LOGIN_WINDOW_MIN = 15;
export const OPERATOR_LOGIN_MAX_PER_PAIR = 5;
export const OPERATOR_LOGIN_EMAIL_FREE = 10;
export const OPERATOR_LOGIN_EMAIL_MAX_DELAY_S = 900;
export const OPERATOR_LOGIN_MAX_CODE = 5;
export const OPERATOR_LOGIN_MAX_PER_IP = 20;
/** Rows of operator_login_failures are kept this long (src/console/cleanup.ts), well past the window. */
export const OPERATOR_LOGIN_RETENTION_MIN = 60;
// Advisory lock namespaces (see src/portal/auth.ts for the portal's): e-mail first, then address.
const LOCK_OPERATOR_EMAIL = 7261201;
const LOCK_OPERATOR_IP = 7261202;

/** 15 minutes without a request end an operator's session. */
export const OPERATOR_SESSION_IDLE_MS = 15 * 60 * 1000;
/** An operator's session: 12 hours at most, OPERATOR_SESSION_IDLE_MS without a request ends it. */
export const operatorSessions = sessionStore({
  table: 'operator_sessions',
  subject: 'operator_id',
  ttlMs: 12 * 3600 * 1000,
  idleMs: OPERATOR_SESSION_IDLE_MS,
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

/** A new operator with a password (given, or generated), a TOTP secret and recovery codes: returned once; audited (operator_create) in the same transaction. */
export async function createOperator(
  db: pg.Pool,
  a: { email: string; createdBy: string | null; password?: string; ip?: string },
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
      // audited in the creation's transaction: by the operator who made it, or the CLI
      await audit(tx, { operatorId: a.createdBy, action: 'operator_create', ip: a.ip ?? 'cli', target: rows[0].id, after: { email } });
      return rows[0] as Operator;
    });
    return { ok: true, setup: setupOf(operator, c) };
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return { ok: false, error: 'taken' };
    throw err;
  }
}

/** New password, TOTP secret and recovery codes for an operator who lost them (the CLI's `operator reset`); every session ends; audited (operator_reset, from `cli`) in the same transaction. */
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
    await audit(tx, { operatorId: null, action: 'operator_reset', ip: 'cli', target: rows[0].id, after: { email: rows[0].email } });
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

/**
 * Disables an operator (they can no longer sign in; their sessions end), audited (operator_disable,
 * by `by`, or the CLI when null) in the same transaction: catraca_console_disable_operator.
 * False: no such operator.
 */
export async function disableOperator(db: DbClient, id: string, by: { operatorId: string | null; ip: string }): Promise<boolean> {
  const { rows } = await db.query('select catraca_console_disable_operator($1, $2, $3) as ok', [by.operatorId, by.ip, id]);
  return rows[0].ok === true;
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
  | { ok: false; error: 'rate_limited'; minutes?: number; seconds?: number }
  | { ok: false; error: 'bad_credentials'; failed: 'password' | 'code'; operator: Operator | null };

/**
 * Counts and records one attempt before anything is checked (src/web/sign-in.ts), so that parallel
 * guesses see each other: the limits above are checked against every failed or in-flight attempt
 * of the window. The row is recorded as a password failure; a correct password turns it into a
 * code attempt (see signIn).
 */
const signInAttempts = loginThrottle({
  table: 'operator_login_failures',
  locks: { email: LOCK_OPERATOR_EMAIL, ip: LOCK_OPERATOR_IP },
  windowMin: OPERATOR_LOGIN_WINDOW_MIN,
  maxPerPair: OPERATOR_LOGIN_MAX_PER_PAIR,
  maxPerIp: OPERATOR_LOGIN_MAX_PER_IP,
  emailFree: OPERATOR_LOGIN_EMAIL_FREE,
  emailMaxDelayS: OPERATOR_LOGIN_EMAIL_MAX_DELAY_S,
  maxCodes: OPERATOR_LOGIN_MAX_CODE,
});

/** Password and code (TOTP, or a recovery code) in one step; whichever is wrong, the answer is the same. */
export async function signIn(db: pg.Pool, a: { email: string; password: string; code: string; ip: string; now?: number }): Promise<SignInResult> {
  const email = normalizeEmail(a.email).slice(0, 254);
  const reserved = await signInAttempts.reserve(db, email, a.ip);
  if (!reserved.ok) return { error: 'rate_limited', ...reserved };
  const { rows } = await db.query(
    'select id, email, created_at, created_by, disabled_at, password_hash, totp_secret from operators where email = $1 and disabled_at is null',
    [email],
  );
  const row = rows[0];
  const pw = String(a.password ?? '').slice(0, 1024);
  const passwordOk = await passwordMatches(row?.password_hash, pw);
  const { password_hash: _h, totp_secret: secret, ...operator } = row ?? {};
  // a wrong password keeps the row recorded above (a password failure of this pair and e-mail)
  if (!passwordOk) return { ok: false, error: 'bad_credentials', failed: 'password', operator: row ? (operator as Operator) : null };
  // the password was right: from here the attempt counts against the operator's codes, not the pair's passwords
  await db.query(`update operator_login_failures set kind = 'code' where id = $1`, [reserved.id]);
  const code = String(a.code ?? '').trim();
  let recoveryCodesLeft: number | null = null;
  if (/^\d{6}$/.test(code)) {
    if (!(await acceptTotp(db, row.id, secret, row.email, code, a.now ?? Date.now())))
      return { ok: false, error: 'bad_credentials', failed: 'code', operator: operator as Operator };
  } else {
    recoveryCodesLeft = await useRecoveryCode(db, row.id, code);
    if (recoveryCodesLeft === null) return { ok: false, error: 'bad_credentials', failed: 'code', operator: operator as Operator };
  }
  await signInAttempts.clear(db, email, a.ip);
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
