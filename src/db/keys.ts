import { createId } from '@paralleldrive/cuid2';
import { generateApiKey, hashApiKey, keyHint } from '../auth/keys.ts';
import type { DbClient } from './pool.ts';

export type LimitReset = 'daily' | 'weekly' | 'monthly';

export interface ApiKeyRecord {
  id: string;
  tenant_id: string;
  key_hint: string;
  label: string;
  models: string[] | null; // null = '*'
  limit_micros: bigint | null;
  limit_reset: LimitReset | null;
  held_micros: bigint;
  usage_micros: bigint;
  window_start: Date | null;
  window_usage_micros: bigint;
  rate_limit_requests: number | null;
  rate_limit_interval_s: number | null;
  /** requests in flight at once, across every front door */
  max_concurrent: number | null;
  /** tokens per minute (prompt estimate + output cap, counted at admission) */
  tpm: number | null;
  /** micro-BRL each end user may spend per UTC day */
  end_user_daily_limit: bigint | null;
  /** the portal user who created it; null: an operator's CLI */
  created_by: string | null;
  is_demo: boolean;
  /** only deployments in this country (ISO 3166-1 alpha-2) may serve its requests; null: anywhere */
  data_country?: string | null;
  created_at: Date;
  last_used_at: Date | null;
  expires_at: Date | null;
  revoked_at: Date | null;
}

export interface CreateKeyInput {
  tenantId: string;
  label?: string;
  models?: string[] | null;
  limitMicros?: bigint | null;
  limitReset?: LimitReset | null;
  rateLimitRequests?: number | null;
  rateLimitIntervalS?: number | null;
  maxConcurrent?: number | null;
  tpm?: number | null;
  endUserDailyLimit?: bigint | null;
  createdBy?: string | null;
  expiresAt?: Date | null;
  isDemo?: boolean;
  dataCountry?: string | null;
}

/** Whether a key has limits counted per request under its row lock (it never admits from a lease). */
export function hasFinerLimits(k: Pick<ApiKeyRecord, 'max_concurrent' | 'tpm' | 'end_user_daily_limit'>): boolean {
  return k.max_concurrent !== null || k.tpm !== null || k.end_user_daily_limit !== null;
}

/** Returns the record and the plain key. The plain key is never stored: return it to the user once. */
export async function createApiKey(db: DbClient, input: CreateKeyInput): Promise<{ record: ApiKeyRecord; key: string }> {
  const key = generateApiKey();
  const { rows } = await db.query(
    `insert into api_keys (id, tenant_id, key_hash, key_hint, label, models, limit_micros, limit_reset,
                           rate_limit_requests, rate_limit_interval_s, expires_at, is_demo,
                           max_concurrent, tpm, end_user_daily_limit, created_by, data_country)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) returning *`,
    [
      `key_${createId()}`,
      input.tenantId,
      hashApiKey(key),
      keyHint(key),
      input.label ?? '',
      input.models ?? null,
      input.limitMicros ?? null,
      input.limitReset ?? null,
      input.rateLimitRequests ?? null,
      input.rateLimitIntervalS ?? null,
      input.expiresAt ?? null,
      input.isDemo ?? false,
      input.maxConcurrent ?? null,
      input.tpm ?? null,
      input.endUserDailyLimit ?? null,
      input.createdBy ?? null,
      input.dataCountry ?? null,
    ],
  );
  return { record: stripHash(rows[0]), key };
}

function stripHash(row: Record<string, unknown>): ApiKeyRecord {
  const { key_hash: _hash, ...rest } = row;
  return rest as unknown as ApiKeyRecord;
}

export async function findKeyByHash(db: DbClient, hash: Buffer): Promise<ApiKeyRecord | null> {
  const { rows } = await db.query('select * from api_keys where key_hash = $1', [hash]);
  return rows[0] ? stripHash(rows[0]) : null;
}

// `createdBy`, when given, narrows to the keys that portal user created (a developer's own keys).

export async function getKey(db: DbClient, id: string, tenantId?: string, createdBy?: string): Promise<ApiKeyRecord | null> {
  const { rows } = tenantId
    ? await db.query('select * from api_keys where id = $1 and tenant_id = $2 and ($3::text is null or created_by = $3)', [id, tenantId, createdBy ?? null])
    : await db.query('select * from api_keys where id = $1', [id]);
  return rows[0] ? stripHash(rows[0]) : null;
}

export async function listKeys(db: DbClient, tenantId: string, createdBy?: string): Promise<ApiKeyRecord[]> {
  const { rows } = await db.query('select * from api_keys where tenant_id = $1 and ($2::text is null or created_by = $2) order by created_at desc', [
    tenantId,
    createdBy ?? null,
  ]);
  return rows.map(stripHash);
}

/** Revokes the key (scoped to a tenant when given). Returns false when no such key. Idempotent. */
export async function revokeKey(db: DbClient, id: string, tenantId?: string, createdBy?: string): Promise<boolean> {
  const { rowCount } = tenantId
    ? await db.query(
        'update api_keys set revoked_at = coalesce(revoked_at, now()) where id = $1 and tenant_id = $2 and ($3::text is null or created_by = $3)',
        [id, tenantId, createdBy ?? null],
      )
    : await db.query('update api_keys set revoked_at = coalesce(revoked_at, now()) where id = $1', [id]);
  return (rowCount ?? 0) > 0;
}

/** Spend of a key over the current UTC day, ISO week and month, from the ledger. */
export async function keyUsageWindows(db: DbClient, keyId: string): Promise<{ daily: bigint; weekly: bigint; monthly: bigint; total: bigint }> {
  const { rows } = await db.query(
    `select
       coalesce(sum(amount_micros) filter (where created_at >= catraca_window_start('daily', now())), 0)::bigint as daily,
       coalesce(sum(amount_micros) filter (where created_at >= catraca_window_start('weekly', now())), 0)::bigint as weekly,
       coalesce(sum(amount_micros) filter (where created_at >= catraca_window_start('monthly', now())), 0)::bigint as monthly,
       coalesce(sum(amount_micros), 0)::bigint as total
     from ledger where key_id = $1 and kind = 'debit'`,
    [keyId],
  );
  return rows[0];
}
