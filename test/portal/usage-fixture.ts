import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { createApiKey } from '../../src/db/keys.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { type DbClient, withTransaction } from '../../src/db/pool.ts';

// Ledger rows of known content for the usage, export and dashboard tests, written as the superuser
// (the ledger has no other writer than the settle and credit functions, whose times are "now").
// Other test files of the run check the whole ledger (`catraca ledger check`) while these run, so
// rows are only ever written through `ledgerRows`: in one transaction that leaves them reconciled.

export interface LedgerEntry {
  at: string;
  kind: 'credit' | 'debit';
  source: string;
  micros: bigint;
  balanceAfter: bigint;
  requestId?: string;
  externalId?: string;
  keyId?: string;
  model?: string;
  /** Where it ran: the deployment that answered, its region and country. */
  ran?: { deployment: string; region?: string; country?: string };
  /** The batch the request was a line of (ledger.batch_id). */
  batchId?: string;
  endUser?: string;
  route?: string;
  tokens?: { input: number; output: number; cached?: number; cacheWrite?: number; cacheWrite1h?: number; reasoning?: number };
  estimated?: boolean;
  outcome?: string;
  note?: string;
}

async function insertEntry(db: DbClient, tenantId: string, e: LedgerEntry): Promise<bigint> {
  const t = e.tokens;
  const { rows } = await db.query(
    `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, external_id, key_id, model,
                         input_tokens, output_tokens, cached_tokens, cache_write_tokens, cache_write_1h_tokens, reasoning_tokens,
                         route, end_user, estimated, outcome, note, created_at, deployment, region, country, batch_id)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25) returning id`,
    [
      tenantId,
      e.kind,
      e.micros,
      e.balanceAfter,
      e.source,
      e.requestId ?? null,
      e.externalId ?? null,
      e.keyId ?? null,
      e.model ?? null,
      t?.input ?? null,
      t?.output ?? null,
      t?.cached ?? null,
      t?.cacheWrite ?? null,
      t?.cacheWrite1h ?? null,
      t?.reasoning ?? null,
      e.route ?? null,
      e.endUser ?? null,
      e.estimated ?? false,
      e.outcome ?? null,
      e.note ?? null,
      e.at,
      e.ran?.deployment ?? null,
      e.ran?.region ?? null,
      e.ran?.country ?? null,
      e.batchId ?? null,
    ],
  );
  return rows[0].id;
}

/**
 * Writes a tenant's fixture rows in one transaction and leaves them as `catraca ledger check`
 * wants: an opening grant dated a day before the tenant's first row for what the rows' balances
 * assume, and the tenant's balance set to its last row's balance_after.
 */
export async function ledgerRows<T>(db: pg.Pool, tenantId: string, write: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return withTransaction(db, async (client) => {
    const out = await write(client);
    await client.query(
      `with s as (select coalesce(sum(case kind when 'credit' then amount_micros else -amount_micros end), 0)::bigint as total,
                         min(created_at) as first
                    from ledger where tenant_id = $1),
            l as (select balance_after_micros as last from ledger where tenant_id = $1 order by id desc limit 1),
            opening as (
              insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, note, created_at)
              select $1, case when l.last > s.total then 'credit' else 'debit' end, abs(l.last - s.total), l.last, 'grant',
                     'test fixture: opening balance', s.first - interval '1 day'
                from s, l where l.last <> s.total)
       update tenants set balance_micros = (select last from l) where id = $1 and exists (select 1 from l)`,
      [tenantId],
    );
    return out;
  });
}

/** Fixture rows of a tenant (see ledgerRows); their ids in order. */
export async function insertEntries(db: pg.Pool, tenantId: string, entries: LedgerEntry[]): Promise<bigint[]> {
  return ledgerRows(db, tenantId, async (client) => {
    const ids: bigint[] = [];
    for (const e of entries) ids.push(await insertEntry(client, tenantId, e));
    return ids;
  });
}

export const uniq = () => randomBytes(5).toString('hex');

/** A label that is a spreadsheet formula, and one that needs CSV quoting. */
export const FORMULA_LABEL = '=HYPERLINK("http://evil.example")';
export const QUOTED_LABEL = 'Padaria, "Zé"';
export const FORMULA_END_USER = '=cmd|calc';
export const QUOTED_END_USER = 'cliente "A", filial\nnorte';

/**
 * The known ledger of a tenant: six entries from 2025-03-01 to 2025-03-02 (São Paulo days), and one
 * just before and one just after. A debit at 02:30 UTC on 03-02 is 23:30 on 03-01 in São Paulo.
 */
export async function knownLedger(db: pg.Pool, tenantId: string) {
  const u = uniq();
  const k1 = (await createApiKey(db, { tenantId, label: FORMULA_LABEL })).record.id;
  const k2 = (await createApiKey(db, { tenantId, label: QUOTED_LABEL })).record.id;
  const entries: Record<string, LedgerEntry> = {
    before: {
      at: '2025-03-01T02:59:59.999999Z', // 2025-02-28 23:59:59 in São Paulo: outside
      kind: 'debit',
      source: 'request',
      micros: 7n,
      balanceAfter: 0n,
      requestId: `req-before-${u}`,
      keyId: k1,
      model: 'sim/echo',
      tokens: { input: 1, output: 1 },
    },
    pix: {
      at: '2025-03-01T12:00:00Z',
      kind: 'credit',
      source: 'pix',
      micros: 50_000_000n,
      balanceAfter: 50_000_000n,
      externalId: `E2E-${u}`,
    },
    echo1: {
      at: '2025-03-01T20:00:00Z',
      kind: 'debit',
      source: 'request',
      micros: 5n,
      balanceAfter: 49_999_995n,
      requestId: `req-1-${u}`,
      keyId: k1,
      model: 'sim/echo',
      ran: { deployment: 'brazilsouth', region: 'brazilsouth', country: 'BR' },
      endUser: FORMULA_END_USER,
      route: 'chat',
      tokens: { input: 10, output: 20 },
      outcome: 'completed',
    },
    echo2: {
      at: '2025-03-02T02:30:00Z', // 2025-03-01 23:30 in São Paulo
      kind: 'debit',
      source: 'request',
      micros: 1_234_567n,
      balanceAfter: 48_765_428n,
      requestId: `req-2-${u}`,
      keyId: k1,
      model: 'sim/echo',
      ran: { deployment: 'brazilsouth', region: 'brazilsouth', country: 'BR' },
      endUser: FORMULA_END_USER,
      route: 'chat',
      tokens: { input: 1000, output: 200, cached: 100, cacheWrite: 50, cacheWrite1h: 0, reasoning: 20 },
      outcome: 'completed',
    },
    lorem: {
      at: '2025-03-02T03:00:00Z', // 2025-03-02 00:00 in São Paulo
      kind: 'debit',
      source: 'request',
      micros: 1n,
      balanceAfter: 48_765_427n,
      requestId: `req-3-${u}`,
      keyId: k2,
      model: 'sim/lorem',
      ran: { deployment: 'primary' }, // the model's own row declares no place
      batchId: `batch_${u}`, // a line of a batch
      endUser: QUOTED_END_USER,
      route: 'messages',
      tokens: { input: 10, output: 5 },
      estimated: true,
      outcome: 'cancelled',
    },
    refund: {
      at: '2025-03-02T15:00:00Z',
      kind: 'debit',
      source: 'pix_refund',
      micros: 10_000_000n,
      balanceAfter: 38_765_427n,
      externalId: `D-${u}`,
    },
    grant: {
      at: '2025-03-02T20:00:00Z',
      kind: 'credit',
      source: 'grant',
      micros: 1n,
      balanceAfter: 38_765_428n,
      note: '+55 11 99999-0000',
    },
    after: {
      at: '2025-03-03T03:00:00Z', // 2025-03-03 00:00 in São Paulo: outside
      kind: 'debit',
      source: 'request',
      micros: 9n,
      balanceAfter: 38_765_419n,
      requestId: `req-after-${u}`,
      keyId: k2,
      model: 'sim/lorem',
      tokens: { input: 1, output: 1 },
    },
  };
  const written = await insertEntries(db, tenantId, Object.values(entries));
  const ids = Object.fromEntries(Object.keys(entries).map((name, i) => [name, written[i]])) as Record<keyof typeof entries, bigint>;
  return { k1, k2, u, ids };
}

/** Another tenant's rows in the same days: never in anyone else's files or pages. */
export async function otherTenantLedger(db: pg.Pool) {
  const t = await createTenant(db, `other-${uniq()}`);
  const k = (await createApiKey(db, { tenantId: t.id, label: 'tenant-b-key' })).record.id;
  await insertEntries(
    db,
    t.id,
    ['2025-03-01T15:00:00Z', '2025-03-02T15:00:00Z'].map((at) => ({
      at,
      kind: 'debit',
      source: 'request',
      micros: 777_777n,
      balanceAfter: 0n,
      requestId: `req-b-${uniq()}`,
      keyId: k,
      model: 'sim/b-only',
      endUser: 'b-user',
      tokens: { input: 1, output: 1 },
    })),
  );
  return t.id;
}

/** n debits of 1..n micro-reais, one a minute from `start`, on one key, spread over 7 end users and 3 models (SQL, fast). */
export async function manyDebits(db: pg.Pool, tenantId: string, n: number, start: string): Promise<string> {
  const k = (await createApiKey(db, { tenantId, label: 'bulk' })).record.id;
  const u = uniq();
  await ledgerRows(db, tenantId, (client) =>
    client.query(
      `insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, request_id, key_id, model,
                           input_tokens, output_tokens, end_user, route, outcome, created_at)
       select $1, 'debit', i, ($5::bigint * ($5::bigint + 1) - i * (i + 1)) / 2, 'request', $2 || i, $3, 'sim/m' || (i % 3), 100 + i % 50, 200,
              'user-' || (i % 7), 'chat', 'completed', $4::timestamptz + make_interval(mins => i::int)
         from generate_series(1, $5::bigint) as i`,
      [tenantId, `bulk-${u}-`, k, start, n],
    ),
  );
  return k;
}
