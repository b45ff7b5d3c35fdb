import { createId } from '@paralleldrive/cuid2';
import type { DbClient } from './pool.ts';

export interface Tenant {
  id: string;
  name: string;
  balance_micros: bigint;
  held_micros: bigint;
  created_at: Date;
}

export async function createTenant(db: DbClient, name: string, id = `ten_${createId()}`): Promise<Tenant> {
  const { rows } = await db.query('insert into tenants (id, name) values ($1, $2) returning *', [id, name]);
  return rows[0];
}

export async function getTenant(db: DbClient, id: string): Promise<Tenant | null> {
  const { rows } = await db.query('select * from tenants where id = $1', [id]);
  return rows[0] ?? null;
}

/** Totals for GET /v1/credits: everything ever credited and everything ever debited. */
export async function tenantTotals(db: DbClient, id: string): Promise<{ credits: bigint; debits: bigint; balance: bigint; held: bigint } | null> {
  const { rows } = await db.query(
    `select t.balance_micros, t.held_micros,
            coalesce((select sum(amount_micros) from ledger where tenant_id = t.id and kind = 'credit'), 0)::bigint as credits,
            coalesce((select sum(amount_micros) from ledger where tenant_id = t.id and kind = 'debit'), 0)::bigint as debits
       from tenants t where t.id = $1`,
    [id],
  );
  if (!rows[0]) return null;
  return { credits: rows[0].credits, debits: rows[0].debits, balance: rows[0].balance_micros, held: rows[0].held_micros };
}
