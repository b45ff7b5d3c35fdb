import type { DbClient } from '../db/pool.ts';

// The invoices table (migrations 061): what the issuer, the portal, the console and the CLI read
// and change. A note's state changes only here.

export interface InvoiceRow {
  id: string;
  tenant_id: string;
  kind: 'topup' | 'monthly';
  pix_txid: string | null;
  period: Date | null;
  amount_micros: bigint;
  competence_at: Date;
  dps_serie: string;
  dps_number: string;
  dps_id: string | null;
  dps_xml: string | null;
  profile_id: string | null;
  state: 'pending' | 'issued' | 'rejected';
  attempts: number;
  next_attempt_at: Date;
  claimed_until: Date | null;
  error_code: string | null;
  error_message: string | null;
  access_key: string | null;
  nfse_number: string | null;
  nfse_xml: Buffer | null;
  issued_at: Date | null;
  cancel_state: 'pending' | 'done' | 'refused' | 'outside_window' | 'partial_refund' | null;
  cancel_note: string | null;
  cancel_requested_at: Date | null;
  cancelled_at: Date | null;
  event_xml: Buffer | null;
  published_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

/** The columns a list shows (no documents). */
const SUMMARY =
  'id, tenant_id, kind, pix_txid, period, amount_micros, competence_at, dps_serie, dps_number, dps_id, state, attempts, next_attempt_at, error_code, error_message, access_key, nfse_number, issued_at, cancel_state, cancel_note, cancelled_at, created_at, updated_at';

export type InvoiceSummary = Omit<InvoiceRow, 'dps_xml' | 'nfse_xml' | 'event_xml' | 'profile_id' | 'claimed_until' | 'published_at' | 'cancel_requested_at'>;

/** The cancel_note of a cancellation a full refund asked for. */
export const REFUND_NOTE = 'top-up refunded in full';

/** The note of a credited top-up, made in the credit's transaction (catraca_invoice_topup); its id, or null when issuing is off or monthly. */
export async function invoiceForTopUp(c: DbClient, txid: string): Promise<string | null> {
  return (await c.query('select catraca_invoice_topup($1) as id', [txid])).rows[0]?.id ?? null;
}

/**
 * After a refund of a top-up (in the refund's transaction): its note is to be cancelled when the
 * whole top-up was given back; a partial refund cannot cancel it (the operator substitutes the
 * note), which the console shows. Returns the invoice's id when a cancellation was requested.
 */
export async function cancelForRefund(c: DbClient, txid: string): Promise<string | null> {
  const { rows } = await c.query(
    `with refunded as (select coalesce(sum(amount_micros), 0)::bigint as total from pix_refunds where txid = $1 and status = 'DEVOLVIDO')
     update invoices i
        set cancel_state = case when r.total >= i.amount_micros then 'pending' else 'partial_refund' end,
            cancel_note = case when r.total >= i.amount_micros then $2
                               else 'partial refund of ' || r.total::text || ' micro-BRL: a note cannot be cancelled in part; substitute it at Sefin' end,
            cancel_requested_at = now(), next_attempt_at = now(), published_at = null, updated_at = now()
       from refunded r
      where i.pix_txid = $1 and (i.cancel_state is null or i.cancel_state = 'partial_refund') and r.total > 0
      returning i.id, i.cancel_state`,
    [txid, REFUND_NOTE],
  );
  return rows[0]?.cancel_state === 'pending' ? rows[0].id : null;
}

export async function getInvoice(db: DbClient, id: string): Promise<InvoiceRow | null> {
  return (await db.query('select * from invoices where id = $1', [id])).rows[0] ?? null;
}

export async function listInvoices(db: DbClient, o: { tenantId?: string; state?: string; problems?: boolean; limit?: number } = {}): Promise<InvoiceSummary[]> {
  const where: string[] = [];
  const args: unknown[] = [];
  if (o.tenantId) where.push(`tenant_id = $${args.push(o.tenantId)}`);
  if (o.state) where.push(`(state = $${args.push(o.state)} or cancel_state = $${args.length})`);
  if (o.problems) where.push(`(state = 'rejected' or cancel_state in ('refused', 'outside_window', 'partial_refund') or (state = 'pending' and attempts > 0))`);
  const sql = `select ${SUMMARY} from invoices ${where.length ? `where ${where.join(' and ')}` : ''} order by created_at desc, id limit $${args.push(o.limit ?? 100)}`;
  return (await db.query(sql, args)).rows;
}

/**
 * An operator's retry after a fix (console, CLI): a rejected note is made again from the current
 * settings and profile (a new DPS with the same number: a rejected DPS made no NFS-e), a refused
 * cancellation is tried again. What it did, or why not.
 */
export async function retryInvoice(db: DbClient, id: string): Promise<'issue' | 'cancel' | 'nothing'> {
  const { rows } = await db.query(
    `update invoices set
        state = case when state = 'rejected' then 'pending' else state end,
        dps_id = case when state = 'rejected' then null else dps_id end,
        dps_xml = case when state = 'rejected' then null else dps_xml end,
        cancel_state = case when state = 'issued' and cancel_state = 'refused' then 'pending' else cancel_state end,
        next_attempt_at = now(), claimed_until = null, published_at = null, updated_at = now()
      where id = $1 and (state = 'rejected' or (state = 'pending' and next_attempt_at > now()) or (state = 'issued' and cancel_state = 'refused'))
      returning state, cancel_state`,
    [id],
  );
  if (!rows[0]) return 'nothing';
  return rows[0].state === 'pending' ? 'issue' : 'cancel';
}

/** An operator's cancellation of an issued note (console, CLI): the issuer sends the event. */
export async function requestCancel(db: DbClient, id: string, note: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `update invoices set cancel_state = 'pending', cancel_note = $2, cancel_requested_at = now(), next_attempt_at = now(), published_at = null, updated_at = now()
      where id = $1 and state = 'issued' and (cancel_state is null or cancel_state in ('refused', 'partial_refund'))`,
    [id, note.slice(0, 255)],
  );
  return (rowCount ?? 0) > 0;
}

export interface ReconcileRow {
  txid: string;
  tenant_id: string;
  amount_micros: bigint;
  paid_at: Date;
  invoice_id: string | null;
  state: string | null;
  reason: string;
}

/**
 * The reconciliation: every credited top-up and its note, or the reason it has none yet — the
 * issuing state ("pending: …", "rejected E0310: …"), "issued in the monthly note of 2026-11",
 * "credited before NFS-e issuing was turned on", "NFS-e issuing is off". Only the problems when
 * `problems` (an issued note is no problem).
 */
export async function reconcile(db: DbClient, o: { problems?: boolean; limit?: number; tenantId?: string } = {}): Promise<ReconcileRow[]> {
  const { rows } = await db.query(
    `with s as (select (select value from nfse_settings where name = 'since')::timestamptz as since)
     select c.txid, c.tenant_id, c.amount_micros, c.paid_at, coalesce(i.id, m.id) as invoice_id, coalesce(i.state, m.state) as state,
            case when i.id is not null then
                   case when i.state = 'issued' then 'issued ' || i.access_key
                        when i.state = 'rejected' then 'rejected ' || coalesce(i.error_code, '') || ': ' || coalesce(i.error_message, '')
                        else 'pending (' || i.attempts || ' attempts' || coalesce('; last: ' || i.error_message, '') || ')' end
                 when m.id is not null then 'in the monthly note ' || m.id || ' (' || m.state || ')'
                 when s.since is null then 'NFS-e issuing is off (NFSE_PROVIDER)'
                 when c.paid_at < s.since then 'credited before NFS-e issuing was turned on (' || to_char(s.since at time zone 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC)'
                 when (select value from nfse_settings where name = 'emit_on') = 'monthly' then 'awaiting its month''s note (NFSE_EMIT_ON=monthly)'
                 else 'no note yet: the next sweep makes it' end as reason
       from pix_charges c cross join s
       left join invoices i on i.pix_txid = c.txid
       left join invoices m on m.kind = 'monthly' and m.tenant_id = c.tenant_id
                           and m.period = date_trunc('month', c.paid_at at time zone 'America/Sao_Paulo')::date
      where c.status = 'CONCLUIDA' and c.paid_at is not null
        and ($1::text is null or c.tenant_id = $1)
        and (not $2 or coalesce(i.state, m.state, '') <> 'issued')
      order by c.paid_at desc limit $3`,
    [o.tenantId ?? null, o.problems ?? false, o.limit ?? 200],
  );
  return rows;
}

/**
 * The sweep's repair: the notes that should exist and do not — a top-up credited while issuing
 * was on whose note is missing (topup mode), a past month's note of each tenant (monthly mode).
 * Returns the ids it made.
 */
export async function makeMissing(db: DbClient, serie: string, emitOn: 'topup' | 'monthly', now = new Date()): Promise<string[]> {
  if (emitOn === 'topup') {
    const { rows } = await db.query(
      `insert into invoices (id, tenant_id, kind, pix_txid, amount_micros, competence_at, dps_serie)
       select 'inv_' || replace(gen_random_uuid()::text, '-', ''), c.tenant_id, 'topup', c.txid, c.amount_micros, c.paid_at, $1
         from pix_charges c
        where c.status = 'CONCLUIDA' and c.paid_at is not null
          and c.paid_at >= (select value::timestamptz from nfse_settings where name = 'since')
          and not exists (select 1 from invoices i where i.pix_txid = c.txid)
          and not exists (select 1 from invoices m where m.kind = 'monthly' and m.tenant_id = c.tenant_id
                           and m.period = date_trunc('month', c.paid_at at time zone 'America/Sao_Paulo')::date)
        order by c.paid_at limit 500
       on conflict do nothing returning id`,
      [serie],
    );
    return rows.map((r) => r.id);
  }
  // monthly: each tenant's top-ups of each ended month (Brasília), credited while issuing was on, in one note
  const { rows } = await db.query(
    `insert into invoices (id, tenant_id, kind, period, amount_micros, competence_at, dps_serie)
     select 'inv_' || replace(gen_random_uuid()::text, '-', ''), c.tenant_id, 'monthly', m.month, sum(c.amount_micros),
            ((m.month + interval '1 month') at time zone 'America/Sao_Paulo') - interval '1 second', $1
       from pix_charges c
       cross join lateral (select date_trunc('month', c.paid_at at time zone 'America/Sao_Paulo')::date as month) m
      where c.status = 'CONCLUIDA' and c.paid_at is not null
        and c.paid_at >= (select value::timestamptz from nfse_settings where name = 'since')
        and m.month < date_trunc('month', $2::timestamptz at time zone 'America/Sao_Paulo')::date
        and not exists (select 1 from invoices i where i.pix_txid = c.txid)
      group by c.tenant_id, m.month
     on conflict do nothing returning id`,
    [serie, now],
  );
  return rows.map((r) => r.id);
}

/** One of a tenant's notes with its documents, or null (another tenant's id is no note of this one). */
export async function tenantInvoice(db: DbClient, tenantId: string, id: string): Promise<InvoiceRow | null> {
  return (await db.query('select * from invoices where id = $1 and tenant_id = $2', [id, tenantId])).rows[0] ?? null;
}

/** Whether the tenant has saved its billing profile ("Dados fiscais"). */
export async function hasProfile(db: DbClient, tenantId: string): Promise<boolean> {
  return ((await db.query('select 1 from billing_profiles where tenant_id = $1 limit 1', [tenantId])).rowCount ?? 0) > 0;
}
