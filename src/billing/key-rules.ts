// The rules of a new API key, in one place for every way of creating one (the portal's form, the
// admin CLI). Where the two used to differ, the stricter rule holds:
//   label        required, 1–100 characters, no control characters
//   models       '*' or a non-empty list of catalog model ids (vendor/name)
//   limit        a BRL amount in whole centavos ("12.50", "12,50"), same amount rule as top-ups
//   limit_reset  daily | weekly | monthly, only with a limit (refused otherwise, never dropped)
//   rate_limit   "<requests>/<interval>" such as 100/1m (src/auth/key-options.ts)
//   expires      a duration (30d, 12h) or an ISO date, in the future and within 10 years
//   max_concurrent  requests in flight at once, 1 to 100 000
//   tpm             tokens per minute, 1 to 100 000 000
//   end_user_limit  BRL each end user may spend per UTC day, whole centavos
import { parseExpiry, parseRateLimit } from '../auth/key-options.ts';
import type { CreateKeyInput, LimitReset } from '../db/keys.ts';
import { MODEL_ID_RE } from '../db/models.ts';
import { AMOUNT_RULE, parseAmountInput } from './amount-input.ts';

export const KEY_LABEL_MAX = 100;
export const LIMIT_RESETS: readonly LimitReset[] = ['daily', 'weekly', 'monthly'];
const CENTAVO_MICROS = 10_000n;

/** A new key as typed by a person: every field as text. */
export interface KeyInput {
  label: string;
  /** '*' (every model) or model ids */
  models: '*' | string[];
  limit?: string;
  limitReset?: string;
  rateLimit?: string;
  expires?: string;
  maxConcurrent?: string;
  tpm?: string;
  endUserLimit?: string;
}

export type KeyField = 'label' | 'models' | 'limit' | 'limit_reset' | 'rate_limit' | 'expires' | 'max_concurrent' | 'tpm' | 'end_user_limit';

export interface KeyRuleError {
  field: KeyField;
  code:
    | 'bad_label'
    | 'no_models'
    | 'bad_model_id'
    | 'unknown_model'
    | 'bad_limit'
    | 'limit_thousands'
    | 'bad_limit_reset'
    | 'reset_without_limit'
    | 'bad_rate_limit'
    | 'bad_expiry'
    | 'bad_max_concurrent'
    | 'bad_tpm'
    | 'bad_end_user_limit';
  /** What is wrong, in English, without the field's name (the caller names it its own way). */
  message: string;
  /** the offending model id (bad_model_id, unknown_model) */
  model?: string;
}

export type NewKey = Omit<CreateKeyInput, 'tenantId' | 'isDemo'> & { label: string; models: string[] | null };

const fail = (field: KeyField, code: KeyRuleError['code'], message: string, model?: string) => ({ ok: false as const, error: { field, code, message, model } });

/**
 * The key to create, or the first rule it breaks. `knownModels`: the catalog's model ids (null:
 * every rule but catalog membership, for a caller that checks the text before it reads the catalog).
 */
export function checkNewKey(
  input: KeyInput,
  knownModels: ReadonlySet<string> | null,
  now = new Date(),
): { ok: true; key: NewKey } | { ok: false; error: KeyRuleError } {
  const label = input.label.trim();
  if (!label || label.length > KEY_LABEL_MAX || /\p{Cc}/u.test(label)) {
    return fail('label', 'bad_label', `must be 1 to ${KEY_LABEL_MAX} characters, without control characters`);
  }

  let models: string[] | null = null;
  if (input.models !== '*') {
    models = [...new Set(input.models.map((m) => m.trim()).filter(Boolean))];
    if (models.length === 0) return fail('models', 'no_models', "must be '*' or a comma-separated list like vendor/a,vendor/b");
    const badId = models.find((m) => !MODEL_ID_RE.test(m));
    if (badId) return fail('models', 'bad_model_id', `not a model id (vendor/name): ${badId}`, badId);
    const unknown = knownModels ? models.filter((m) => !knownModels.has(m)) : [];
    if (unknown.length) return fail('models', 'unknown_model', `unknown model(s): ${unknown.join(', ')}`, unknown[0]);
  }

  const limit = centavos(input.limit, 'limit', 'bad_limit');
  if (!limit.ok) return limit;
  const limitMicros = limit.micros;

  let limitReset: LimitReset | null = null;
  if (input.limitReset) {
    if (!(LIMIT_RESETS as readonly string[]).includes(input.limitReset)) return fail('limit_reset', 'bad_limit_reset', 'must be daily, weekly or monthly');
    if (limitMicros === null) return fail('limit_reset', 'reset_without_limit', 'needs a limit');
    limitReset = input.limitReset as LimitReset;
  }

  let rate: { requests: number; intervalS: number } | null = null;
  if (input.rateLimit !== undefined && input.rateLimit.trim() !== '') {
    rate = parseRateLimit(input.rateLimit);
    if (!rate) return fail('rate_limit', 'bad_rate_limit', 'must look like 60/60s, 100/1m, 1000/1h (requests/interval)');
  }

  let expiresAt: Date | null = null;
  if (input.expires !== undefined && input.expires.trim() !== '') {
    const r = parseExpiry(input.expires, now);
    if (!r.ok) return fail('expires', 'bad_expiry', `must be a duration like 30d, 12h, 2w or an ISO date like 2026-12-31: ${r.message}`);
    expiresAt = r.at;
  }

  const maxConcurrent = whole(input.maxConcurrent, 100_000);
  if (maxConcurrent === false) return fail('max_concurrent', 'bad_max_concurrent', 'must be a whole number from 1 to 100000');
  const tpm = whole(input.tpm, 100_000_000);
  if (tpm === false) return fail('tpm', 'bad_tpm', 'must be a whole number of tokens per minute from 1 to 100000000');
  const endUser = centavos(input.endUserLimit, 'end_user_limit', 'bad_end_user_limit');
  if (!endUser.ok) return endUser;
  if (endUser.micros === 0n) return fail('end_user_limit', 'bad_end_user_limit', 'must be above zero');

  return {
    ok: true,
    key: {
      label,
      models,
      limitMicros,
      limitReset,
      rateLimitRequests: rate?.requests ?? null,
      rateLimitIntervalS: rate?.intervalS ?? null,
      expiresAt,
      maxConcurrent,
      tpm,
      endUserDailyLimit: endUser.micros,
    },
  };
}

/** A whole number 1..max, null when not given, false when malformed. */
function whole(text: string | undefined, max: number): number | null | false {
  if (text === undefined || text.trim() === '') return null;
  const t = text.trim();
  if (!/^\d{1,9}$/.test(t)) return false;
  const n = Number(t);
  return n >= 1 && n <= max ? n : false;
}

/** A BRL amount in whole centavos (null when not given), or the rule it breaks. */
function centavos(
  text: string | undefined,
  field: KeyField,
  code: 'bad_limit' | 'bad_end_user_limit',
): { ok: true; micros: bigint | null } | { ok: false; error: KeyRuleError } {
  const t = text?.trim().replace(/^R\$\s*/i, '');
  if (!t) return { ok: true, micros: null };
  const r = parseAmountInput(t, { maxDecimals: 2, maxIntegerDigits: 10 });
  if (!r.ok) {
    const thousands = code === 'bad_limit' && (r.error === 'thousands_separator' || r.error === 'ambiguous');
    return fail(field, thousands ? 'limit_thousands' : code, `must be a BRL amount like 12.34: ${r.message}. Amounts are ${AMOUNT_RULE}, in whole centavos.`);
  }
  if (r.micros % CENTAVO_MICROS !== 0n) return fail(field, code, 'must be a BRL amount in whole centavos like 12.34');
  return { ok: true, micros: r.micros };
}
