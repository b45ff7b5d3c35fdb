import type { DbClient } from '../db/pool.ts';

// Pix charges as an operator sees them: the state a charge is in, from the charge (the PSP's
// status), the ledger (was it credited?) and its devoluções (was money given back?):
//   created   ATIVA and not yet expired
//   paid      CONCLUIDA at the PSP but no credit in the ledger (catraca_pix_credit credits at the
//             same moment, so this is an anomaly to look at)
//   credited  paid and credited to the tenant
//   refunded  credited, then (part of it) given back by a devolução
//   expired   EXPIRADA, or ATIVA past its expiry (the reconciler has not looked yet)
//   removed   REMOVIDA_PELO_USUARIO_RECEBEDOR or REMOVIDA_PELO_PSP

export const PIX_STATES = ['created', 'paid', 'credited', 'refunded', 'expired', 'removed'] as const;
export type PixState = (typeof PIX_STATES)[number];

export interface ConsoleCharge {
  txid: string;
  tenant_id: string;
  tenant_name: string;
  amount_micros: bigint;
  status: string;
  state: PixState;
  created_at: Date;
  expires_at: Date;
  paid_at: Date | null;
  end_to_end_id: string | null;
  credited_micros: bigint;
  refunded_micros: bigint;
}

const CHARGES = `
  select c.txid, c.tenant_id, t.name as tenant_name, c.amount_micros, c.status, c.created_at, c.expires_at, c.paid_at, c.end_to_end_id,
         coalesce(cr.micros, 0)::bigint as credited_micros, coalesce(rf.micros, 0)::bigint as refunded_micros,
         case when coalesce(rf.micros, 0) > 0 then 'refunded'
              when cr.micros is not null then 'credited'
              when c.status = 'CONCLUIDA' then 'paid'
              when c.status = 'EXPIRADA' or (c.status = 'ATIVA' and c.expires_at <= now()) then 'expired'
              when c.status = 'ATIVA' then 'created'
              else 'removed' end as state
    from pix_charges c join tenants t on t.id = c.tenant_id
    left join lateral (select sum(l.amount_micros) as micros from ledger l
                        where c.end_to_end_id is not null and l.external_id = c.end_to_end_id and l.kind = 'credit') cr on true
    left join lateral (select sum(r.debited_micros) as micros from pix_refunds r where r.txid = c.txid) rf on true`;

export async function listCharges(
  db: DbClient,
  f: { tenantId?: string; state?: PixState },
  limit = 100,
  offset = 0,
): Promise<{ rows: ConsoleCharge[]; hasMore: boolean }> {
  const { rows } = await db.query(
    `select * from (${CHARGES} where ($1::text is null or c.tenant_id = $1)) x
      where ($2::text is null or x.state = $2) order by x.created_at desc, x.txid limit $3 offset $4`,
    [f.tenantId ?? null, f.state ?? null, limit + 1, offset],
  );
  return { rows: rows.slice(0, limit), hasMore: rows.length > limit };
}

/** How many charges are in each state (the Pix page's summary). */
export async function chargeStates(db: DbClient): Promise<Record<PixState, { count: number; micros: bigint }>> {
  const { rows } = await db.query(`select x.state, count(*)::int as n, sum(x.amount_micros)::bigint as micros from (${CHARGES}) x group by x.state`);
  const out = Object.fromEntries(PIX_STATES.map((s) => [s, { count: 0, micros: 0n }])) as Record<PixState, { count: number; micros: bigint }>;
  for (const r of rows) out[r.state as PixState] = { count: r.n, micros: r.micros };
  return out;
}

export interface ReconcilerRun {
  last_run_at: Date;
  checked: number;
  failed: number;
}

/** The portal's reconciler's last pass (src/pix/service.ts), or null when it never ran. */
export async function reconcilerStatus(db: DbClient): Promise<ReconcilerRun | null> {
  const { rows } = await db.query(`select last_run_at, checked, failed from pix_reconciler_status where name = 'reconciler'`);
  return rows[0] ?? null;
}
