import type { DbClient } from '../db/pool.ts';

export type AdmitStatus =
  | 'ok'
  | 'insufficient_balance'
  | 'key_limit'
  | 'key_revoked'
  | 'rate_limited'
  | 'concurrency_limited'
  | 'tpm_limited'
  | 'end_user_limit'
  | 'tenant_suspended';

export interface AdmitResult {
  status: AdmitStatus;
  held: bigint;
  available: bigint;
  /** the key's request rate limit in this window, null when it has none */
  rl_limit: number | null;
  rl_remaining: number | null;
  /** ms until the rate-limit window resets */
  rl_reset_ms: bigint | null;
}

/** Reserves between min and max micros (see catraca_admit in the schema). */
// The hot calls are named prepared statements: each connection parses them once.
export async function admit(
  db: DbClient,
  a: { requestId: string; tenantId: string; keyId: string; min: bigint; max: bigint; ttlMs: number },
): Promise<AdmitResult> {
  const { rows } = await db.query({
    name: 'catraca_admit',
    text: 'select * from catraca_admit($1, $2, $3, $4, $5, $6)',
    values: [a.requestId, a.tenantId, a.keyId, a.min, a.max, a.ttlMs],
  });
  return rows[0];
}

/**
 * Admission of one line of a vendor-mode batch (catraca_admit_vendor_line): exactly `amount` held,
 * as catraca_admit, the hold of kind 'batch': it counts in the balance and the key's limit, not in
 * the key's max_concurrent (the vendor runs the line, not catraca).
 */
export async function admitVendorLine(
  db: DbClient,
  a: { requestId: string; tenantId: string; keyId: string; amount: bigint; ttlMs: number },
): Promise<AdmitResult> {
  const { rows } = await db.query({
    name: 'catraca_admit_vendor_line',
    text: 'select * from catraca_admit_vendor_line($1, $2, $3, $4, $5)',
    values: [a.requestId, a.tenantId, a.keyId, a.amount, a.ttlMs],
  });
  return rows[0];
}

/**
 * Admission of a key with finer limits (catraca_admit_limited): its concurrency, tokens per minute
 * and per-end-user daily cap are checked under the key's row lock, then the money as catraca_admit.
 */
export async function admitLimited(
  db: DbClient,
  a: { requestId: string; tenantId: string; keyId: string; min: bigint; max: bigint; ttlMs: number; tokens: number; endUser: string | null },
): Promise<AdmitResult> {
  const { rows } = await db.query({
    name: 'catraca_admit_limited',
    text: 'select * from catraca_admit_limited($1, $2, $3, $4, $5, $6, $7, $8)',
    values: [a.requestId, a.tenantId, a.keyId, a.min, a.max, a.ttlMs, a.tokens, a.endUser],
  });
  return rows[0];
}

export interface Settlement {
  requestId: string;
  tenantId: string;
  keyId: string;
  costMicros: bigint;
  model: string;
  inputTokens: number;
  outputTokens: number;
  estimated: boolean;
  outcome: 'completed' | 'cancelled' | 'error';
  at: Date;
  /** the hold the request was admitted under: its own (= requestId, the default) or its door's lease */
  hold?: string | null;
  /** recorded on the ledger row (settleBatch): cache and reasoning parts of the tokens, the route, the end user */
  detail?: {
    cachedTokens?: number;
    cacheWriteTokens?: number;
    cacheWrite1hTokens?: number;
    reasoningTokens?: number;
    route?: string;
    endUser?: string;
    /** where it ran: the deployment's name, its region and country */
    deployment?: string;
    region?: string;
    country?: string;
    /** the batch the request was a line of (src/batch/), recorded as ledger.batch_id */
    batchId?: string;
  };
}

export async function settle(db: DbClient, s: Settlement): Promise<{ status: 'settled' | 'duplicate' | 'unknown_tenant'; debited: bigint; balance: bigint }> {
  const { rows } = await db.query({
    name: 'catraca_settle',
    text: 'select * from catraca_settle($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12::jsonb)',
    values: [
      s.requestId,
      s.tenantId,
      s.keyId,
      s.costMicros,
      s.model,
      s.inputTokens,
      s.outputTokens,
      s.estimated,
      s.outcome,
      s.at,
      s.hold ?? null,
      s.detail ? JSON.stringify(detailJson(s.detail)) : null,
    ],
  });
  return rows[0];
}

/** A settlement's detail as the settle functions read it. */
function detailJson(d: Settlement['detail']) {
  return {
    cached: d?.cachedTokens ?? null,
    cw: d?.cacheWriteTokens ?? null,
    cw1h: d?.cacheWrite1hTokens ?? null,
    reasoning: d?.reasoningTokens ?? null,
    route: d?.route ?? null,
    end_user: d?.endUser ?? null,
    deployment: d?.deployment ?? null,
    region: d?.region ?? null,
    country: d?.country ?? null,
    batch_id: d?.batchId ?? null,
  };
}

/** Suspends a tenant's admission (catraca_suspend_tenant); true when this call did. */
export async function suspendTenant(db: DbClient, tenantId: string, reason: string): Promise<boolean> {
  const { rows } = await db.query('select catraca_suspend_tenant($1, $2) as suspended', [tenantId, reason]);
  return rows[0]?.suspended === true;
}

/** Releases a hold without a debit (the request never reached a worker). */
export async function releaseHold(db: DbClient, requestId: string): Promise<void> {
  await db.query('select catraca_release($1)', [requestId]);
}

export async function credit(
  db: DbClient,
  c: { tenantId: string; amountMicros: bigint; source: string; externalId?: string | null; note?: string | null },
): Promise<{ status: 'credited' | 'duplicate' | 'unknown_tenant'; balance: bigint }> {
  const { rows } = await db.query('select * from catraca_credit($1,$2,$3,$4,$5)', [c.tenantId, c.amountMicros, c.source, c.externalId ?? null, c.note ?? null]);
  return rows[0];
}

/** Opens an admission lease (see catraca_lease_open): 'ok', or 'per_request' when the tenant or key is not rich enough for one. */
export async function openLease(
  db: DbClient,
  l: { leaseId: string; tenantId: string; keyId: string; amount: bigint; richness: number; ttlMs: number },
): Promise<{ status: 'ok' | 'per_request' | 'key_revoked'; held: bigint; available: bigint }> {
  const { rows } = await db.query({
    name: 'catraca_lease_open',
    text: 'select * from catraca_lease_open($1,$2,$3,$4,$5,$6)',
    values: [l.leaseId, l.tenantId, l.keyId, l.amount, l.richness, l.ttlMs],
  });
  return rows[0];
}

/** Closes a lease: keeps covering at most `maxTotal` of debits in all, returns the rest to the balance. */
export async function closeLease(db: DbClient, leaseId: string, maxTotal: bigint): Promise<bigint> {
  const { rows } = await db.query({ name: 'catraca_lease_close', text: 'select catraca_lease_close($1, $2) as released', values: [leaseId, maxTotal] });
  return BigInt(rows[0].released ?? 0);
}

export async function sweepExpiredHolds(db: DbClient, limit = 1000): Promise<number> {
  const { rows } = await db.query('select catraca_sweep_holds($1) as n', [limit]);
  return rows[0].n;
}

export interface AdmitRequest {
  requestId: string;
  tenantId: string;
  keyId: string;
  min: bigint;
  max: bigint;
  ttlMs: number;
}

/** Several admissions of one tenant in one transaction, results in order (catraca_admit_batch). */
export async function admitBatch(db: DbClient, items: AdmitRequest[]): Promise<AdmitResult[]> {
  const payload = items.map((a) => ({ request_id: a.requestId, tenant_id: a.tenantId, key_id: a.keyId, min: a.min.toString(), max: a.max.toString() }));
  const { rows } = await db.query({
    name: 'catraca_admit_batch',
    text: 'select * from catraca_admit_batch($1::jsonb, $2)',
    values: [JSON.stringify(payload), items[0].ttlMs],
  });
  return rows.map(({ request_id: _id, ...r }) => r as AdmitResult);
}

export type SettleResult = { status: 'settled' | 'duplicate' | 'unknown_tenant'; debited: bigint; balance: bigint };

/** Settles many requests in one transaction (catraca_settle_batch); results in order. */
export async function settleBatch(db: DbClient, items: Settlement[]): Promise<SettleResult[]> {
  const payload = items.map((s) => ({
    request_id: s.requestId,
    tenant_id: s.tenantId,
    key_id: s.keyId,
    cost: s.costMicros.toString(),
    model: s.model,
    input: s.inputTokens,
    output: s.outputTokens,
    estimated: s.estimated,
    outcome: s.outcome,
    at: s.at.toISOString(),
    hold: s.hold ?? null,
    ...detailJson(s.detail),
  }));
  const { rows } = await db.query({ name: 'catraca_settle_batch', text: 'select * from catraca_settle_batch($1::jsonb)', values: [JSON.stringify(payload)] });
  return rows.map(({ request_id: _id, ...r }) => r as SettleResult);
}

/** Open per-request holds (a request's, or a vendor-mode batch line's: kind 'batch') and balance leases: how many, and how much they reserve (micro-BRL). */
export async function openHolds(db: DbClient): Promise<{ holds: { count: number; micros: bigint }; leases: { count: number; micros: bigint } }> {
  const { rows } = await db.query(
    `select count(*) filter (where kind <> 'lease')::int as holds, coalesce(sum(amount_micros) filter (where kind <> 'lease'), 0)::bigint as held,
            count(*) filter (where kind = 'lease')::int as leases, coalesce(sum(amount_micros) filter (where kind = 'lease'), 0)::bigint as leased
       from holds`,
  );
  const r = rows[0] as { holds: number; held: bigint | string; leases: number; leased: bigint | string };
  return { holds: { count: r.holds, micros: BigInt(r.held) }, leases: { count: r.leases, micros: BigInt(r.leased) } };
}
