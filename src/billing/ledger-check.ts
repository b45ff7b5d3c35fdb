// `catraca ledger check`: the ledger is the truth, the balances are derived from it. In one
// consistent snapshot (REPEATABLE READ), for every tenant:
//   balance   = Σ credits − Σ debits over the ledger
//   held      = Σ open holds of the tenant            (and per key: key held = Σ its open holds)
//   balance_after of the tenant's latest ledger entry = balance
//   no request id debited twice, no negative balance or hold.
import { formatBrl } from './money.ts';
import { type Db, withTransaction } from '../db/pool.ts';

export interface LedgerMismatch {
  tenant: string;
  check: 'balance' | 'held' | 'key_held' | 'balance_after' | 'negative_balance' | 'negative_held' | 'duplicate_debit';
  /** Amounts are exact BRL decimal strings (6 decimals). */
  expected?: string;
  actual?: string;
  key_id?: string;
  request_id?: string;
  count?: number;
}

export interface LedgerCheckResult {
  ok: boolean;
  tenants_checked: number;
  mismatches: LedgerMismatch[];
}

export async function ledgerCheck(db: Db, opts: { tenantId?: string } = {}): Promise<LedgerCheckResult> {
  return withTransaction(
    db,
    async (client) => {
      const tenant = opts.tenantId ?? null;
      const mismatches: LedgerMismatch[] = [];

      const { rows: tenants } = await client.query(
        `with l as (
           select tenant_id,
                  coalesce(sum(amount_micros) filter (where kind = 'credit'), 0)::bigint as credits,
                  coalesce(sum(amount_micros) filter (where kind = 'debit'), 0)::bigint as debits
             from ledger where ($1::text is null or tenant_id = $1) group by tenant_id),
         h as (select tenant_id, sum(amount_micros)::bigint as held from holds
                where ($1::text is null or tenant_id = $1) group by tenant_id),
         last as (select distinct on (tenant_id) tenant_id, balance_after_micros from ledger
                   where ($1::text is null or tenant_id = $1) order by tenant_id, id desc)
         select t.id, t.balance_micros, t.held_micros,
                coalesce(l.credits, 0)::bigint as credits, coalesce(l.debits, 0)::bigint as debits,
                coalesce(h.held, 0)::bigint as holds, last.balance_after_micros as last_after
           from tenants t left join l on l.tenant_id = t.id left join h on h.tenant_id = t.id
                left join last on last.tenant_id = t.id
          where ($1::text is null or t.id = $1)
          order by t.id`,
        [tenant],
      );
      for (const t of tenants) {
        const expected = (t.credits as bigint) - (t.debits as bigint);
        if (expected !== t.balance_micros) {
          mismatches.push({ tenant: t.id, check: 'balance', expected: formatBrl(expected), actual: formatBrl(t.balance_micros) });
        }
        if (t.holds !== t.held_micros) {
          mismatches.push({ tenant: t.id, check: 'held', expected: formatBrl(t.holds), actual: formatBrl(t.held_micros) });
        }
        if (t.last_after !== null && t.last_after !== t.balance_micros) {
          mismatches.push({ tenant: t.id, check: 'balance_after', expected: formatBrl(t.last_after), actual: formatBrl(t.balance_micros) });
        }
        if (t.balance_micros < 0n) mismatches.push({ tenant: t.id, check: 'negative_balance', actual: formatBrl(t.balance_micros) });
        if (t.held_micros < 0n) mismatches.push({ tenant: t.id, check: 'negative_held', actual: formatBrl(t.held_micros) });
      }

      const { rows: keys } = await client.query(
        `select k.id, k.tenant_id, k.held_micros, coalesce(sum(h.amount_micros), 0)::bigint as holds
           from api_keys k left join holds h on h.key_id = k.id
          where ($1::text is null or k.tenant_id = $1)
          group by k.id having k.held_micros <> coalesce(sum(h.amount_micros), 0)
          order by k.tenant_id, k.id`,
        [tenant],
      );
      for (const k of keys) {
        mismatches.push({ tenant: k.tenant_id, check: 'key_held', key_id: k.id, expected: formatBrl(k.holds), actual: formatBrl(k.held_micros) });
      }

      const { rows: dups } = await client.query(
        `select tenant_id, request_id, count(*)::int as n from ledger
          where kind = 'debit' and request_id is not null and ($1::text is null or tenant_id = $1)
          group by tenant_id, request_id having count(*) > 1 order by tenant_id, request_id`,
        [tenant],
      );
      for (const d of dups) mismatches.push({ tenant: d.tenant_id, check: 'duplicate_debit', request_id: d.request_id, count: d.n });

      return { ok: mismatches.length === 0, tenants_checked: tenants.length, mismatches };
    },
    'begin isolation level repeatable read read only',
  );
}
