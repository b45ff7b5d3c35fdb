import type { DbClient } from '../db/pool.ts';
import { TZ } from './tenants.ts';

// Revenue against vendor cost, per São Paulo day × model × tenant.
//   revenue      what tenants were debited for their requests (ledger debits of source 'request'),
//                less the refunds the console gave back for them (credit adjustments naming the
//                request), plus what it charged later for them (debit adjustments naming the
//                request, e.g. a shortfall recovered): each counted on the request's day × model ×
//                tenant, whenever it was made. An adjustment naming no request has no model and
//                counts nowhere here (it is in the statement and the ledger).
//   vendor cost  the request's tokens at the vendor prices in force when it was made
//                (model_vendor_costs): input not read from or written to the cache at the input
//                price, cache reads at the cached-input price, cache writes at their write prices
//                (each at the input price where none is set), output (reasoning included) at the
//                output price; in USD × the exchange rate recorded with the prices, or in BRL.
//                A line of a batch that ran in `vendor` mode (its id in vendor_batch_ids, migration
//                091: the vendor ran it through its own batch API and bills its batch price) is
//                costed at the batch prices of the same row (batch_input_price …), each one not set
//                falling back to the online price of that row; a `queue`-mode line (catraca ran it
//                at the vendor's online API) and an online request at the online prices.
//   margin       revenue − vendor cost
//   batch        the same three for the group's batch lines (debits naming a batch, ledger.batch_id):
//                revenue at what they were billed (the batch prices), vendor cost as above
//                (docs/batch.md). Online = the totals less these.
// Exact: per request Σ tokens × price (micro-units per 1M tokens) × F, where F is the rate in
// micro-BRL per USD (or 1 000 000 for BRL), summed over the group as an integer, then rounded
// half up once to the micro-real: cost = ⌊(Σ + 5·10¹¹) / 10¹²⌋. Requests of a model without a
// vendor cost count as `uncosted` and add nothing to the cost.

export interface MarginRow {
  day: string;
  model: string;
  tenant_id: string;
  tenant_name: string;
  requests: number;
  input_tokens: bigint;
  cached_tokens: bigint;
  cache_write_tokens: bigint;
  output_tokens: bigint;
  reasoning_tokens: bigint;
  revenue_micros: bigint;
  vendor_cost_micros: bigint;
  uncosted: number;
  /** of the above, the batch lines' (ledger.batch_id set) */
  batch_requests: number;
  batch_revenue_micros: bigint;
  batch_vendor_cost_micros: bigint;
}

export interface MarginFilter {
  /** São Paulo days, inclusive, YYYY-MM-DD */
  from: string;
  to: string;
  tenantId?: string;
  model?: string;
}

/**
 * A price of the row `c` for the line `l`: a line of a batch that ran in vendor mode (`v`, its id in
 * vendor_batch_ids) at the row's batch price where one is set, else (and every other line) at its
 * online price.
 */
const price = (batch: string, online: string) => `(case when v.batch_id is not null then coalesce(c.${batch}, ${online}) else ${online} end)`;

const PICO_TERM = `(greatest(coalesce(l.input_tokens, 0) - coalesce(l.cached_tokens, 0) - coalesce(l.cache_write_tokens, 0) - coalesce(l.cache_write_1h_tokens, 0), 0)::numeric * ${price('batch_input_price', 'c.input_price')}
     + coalesce(l.cached_tokens, 0)::numeric * ${price('batch_cached_input_price', 'coalesce(c.cached_input_price, c.input_price)')}
     + coalesce(l.cache_write_tokens, 0)::numeric * ${price('batch_cache_write_price', 'coalesce(c.cache_write_price, c.input_price)')}
     + coalesce(l.cache_write_1h_tokens, 0)::numeric * ${price('batch_cache_write_1h_price', 'coalesce(c.cache_write_1h_price, c.input_price)')}
     + coalesce(l.output_tokens, 0)::numeric * ${price('batch_output_price', 'c.output_price')})
   * (case when c.currency = 'USD'
           -- the dollar at the rate catraca priced at when the request was made (src/fx/: PTAX or pinned), else the cost's own
           then coalesce((select f.usd_brl_micros from fx_rates f where f.valid_from <= l.created_at order by f.valid_from desc, f.id desc limit 1), c.usd_brl_micros)
           else 1000000 end)`;

export async function marginRows(db: DbClient, f: MarginFilter): Promise<MarginRow[]> {
  const { rows } = await db.query(
    `with r as (
       select to_char((l.created_at at time zone '${TZ}')::date, 'YYYY-MM-DD') as day, l.model, l.tenant_id, l.batch_id is not null as batch,
              l.amount_micros + coalesce((select sum(case when a.kind = 'debit' then a.amount_micros else -a.amount_micros end) from ledger a
                                           where a.ref_request_id = l.request_id and a.tenant_id = l.tenant_id and a.source = 'adjustment'), 0)
                as amount_micros,
              l.input_tokens, l.cached_tokens, l.cache_write_tokens, l.cache_write_1h_tokens, l.output_tokens, l.reasoning_tokens,
              c.currency, case when c.currency is null then 0 else ${PICO_TERM} end as cost_units
         from ledger l
         left join lateral (select * from model_vendor_costs c where c.model_id = l.model and c.valid_from <= l.created_at
                             order by c.valid_from desc, c.id desc limit 1) c on true
         left join vendor_batch_ids v on v.batch_id = l.batch_id
        where l.kind = 'debit' and l.source = 'request'
          and l.created_at >= ($1::date::timestamp at time zone '${TZ}') and l.created_at < (($2::date + 1)::timestamp at time zone '${TZ}')
          and ($3::text is null or l.tenant_id = $3) and ($4::text is null or l.model = $4))
     select r.day, coalesce(r.model, '') as model, r.tenant_id, t.name as tenant_name, count(*)::int as requests,
            coalesce(sum(r.input_tokens), 0)::bigint as input_tokens, coalesce(sum(r.cached_tokens), 0)::bigint as cached_tokens,
            coalesce(sum(coalesce(r.cache_write_tokens, 0) + coalesce(r.cache_write_1h_tokens, 0)), 0)::bigint as cache_write_tokens,
            coalesce(sum(r.output_tokens), 0)::bigint as output_tokens, coalesce(sum(r.reasoning_tokens), 0)::bigint as reasoning_tokens,
            sum(r.amount_micros)::bigint as revenue_micros,
            div(sum(r.cost_units) + 500000000000, 1000000000000)::bigint as vendor_cost_micros,
            count(*) filter (where r.currency is null)::int as uncosted,
            count(*) filter (where r.batch)::int as batch_requests,
            coalesce(sum(r.amount_micros) filter (where r.batch), 0)::bigint as batch_revenue_micros,
            div(coalesce(sum(r.cost_units) filter (where r.batch), 0) + 500000000000, 1000000000000)::bigint as batch_vendor_cost_micros
       from r join tenants t on t.id = r.tenant_id
      group by r.day, r.model, r.tenant_id, t.name
      order by r.day desc, revenue_micros desc, r.model, r.tenant_id`,
    [f.from, f.to, f.tenantId ?? null, f.model ?? null],
  );
  return rows;
}

export interface DayTotal {
  day: string;
  revenue_micros: bigint;
  vendor_cost_micros: bigint;
}

/** Per day of the range (every day, oldest first): the sums of its rows. */
export function dayTotals(rows: MarginRow[], from: string, to: string): DayTotal[] {
  const byDay = new Map<string, DayTotal>();
  for (let d = new Date(`${from}T00:00:00Z`); d <= new Date(`${to}T00:00:00Z`); d = new Date(d.getTime() + 86400000)) {
    const day = d.toISOString().slice(0, 10);
    byDay.set(day, { day, revenue_micros: 0n, vendor_cost_micros: 0n });
  }
  for (const r of rows) {
    const t = byDay.get(r.day);
    if (!t) continue;
    t.revenue_micros += r.revenue_micros;
    t.vendor_cost_micros += r.vendor_cost_micros;
  }
  return [...byDay.values()];
}

export interface MarginTotals {
  requests: number;
  revenue_micros: bigint;
  vendor_cost_micros: bigint;
  uncosted: number;
  batch_requests: number;
  batch_revenue_micros: bigint;
  batch_vendor_cost_micros: bigint;
}

export function totals(rows: MarginRow[]): MarginTotals {
  return rows.reduce(
    (a, r) => ({
      requests: a.requests + r.requests,
      revenue_micros: a.revenue_micros + r.revenue_micros,
      vendor_cost_micros: a.vendor_cost_micros + r.vendor_cost_micros,
      uncosted: a.uncosted + r.uncosted,
      batch_requests: a.batch_requests + r.batch_requests,
      batch_revenue_micros: a.batch_revenue_micros + r.batch_revenue_micros,
      batch_vendor_cost_micros: a.batch_vendor_cost_micros + r.batch_vendor_cost_micros,
    }),
    { requests: 0, revenue_micros: 0n, vendor_cost_micros: 0n, uncosted: 0, batch_requests: 0, batch_revenue_micros: 0n, batch_vendor_cost_micros: 0n },
  );
}

export interface ShortfallRow {
  id: string;
  created_at: Date;
  tenant_id: string;
  tenant_name: string;
  suspended_at: Date | null;
  request_id: string;
  model: string | null;
  key_id: string | null;
  cost_micros: bigint;
  debited_micros: bigint;
  /** debited later by adjustments that name the request */
  recovered_micros: bigint;
}

/** Settlements that could not debit in full (cost above what was debited), newest first. */
export async function shortfalls(db: DbClient, limit = 200): Promise<ShortfallRow[]> {
  const { rows } = await db.query(
    `select l.id::text as id, l.created_at, l.tenant_id, t.name as tenant_name, t.suspended_at, l.request_id, l.model, l.key_id,
            l.cost_micros, l.amount_micros as debited_micros,
            coalesce((select sum(a.amount_micros) from ledger a where a.ref_request_id = l.request_id and a.tenant_id = l.tenant_id
                       and a.kind = 'debit' and a.source = 'adjustment'), 0)::bigint as recovered_micros
       from ledger l join tenants t on t.id = l.tenant_id
      where l.kind = 'debit' and l.source = 'request' and l.cost_micros > l.amount_micros
      order by l.created_at desc, l.id desc limit $1`,
    [limit],
  );
  return rows;
}

/** Today and 29 days before it, in São Paulo. */
export function defaultRange(now = new Date()): { from: string; to: string } {
  const to = new Intl.DateTimeFormat('en-CA', { timeZone: TZ, year: 'numeric', month: '2-digit', day: '2-digit' }).format(now);
  const from = new Date(Date.parse(`${to}T00:00:00Z`) - 29 * 86400000).toISOString().slice(0, 10);
  return { from, to };
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;
/** A range from query parameters: valid days, from ≤ to, at most 366 days; else null. */
export function parseRange(from: string | null, to: string | null): { from: string; to: string } | null {
  const d = defaultRange();
  const f = from || d.from;
  const t = to || d.to;
  if (!DAY.test(f) || !DAY.test(t)) return null;
  const a = Date.parse(`${f}T00:00:00Z`);
  const b = Date.parse(`${t}T00:00:00Z`);
  if (Number.isNaN(a) || Number.isNaN(b) || new Date(a).toISOString().slice(0, 10) !== f || new Date(b).toISOString().slice(0, 10) !== t) return null;
  if (b < a || b - a > 365 * 86400000) return null;
  return { from: f, to: t };
}
