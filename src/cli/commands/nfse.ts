import { brlString, parseFlags, str } from '../args.ts';
import { CliError, UsageError, type CliContext } from '../context.ts';
import { getInvoice, listInvoices, reconcile, requestCancel, retryInvoice } from '../../nfse/store.ts';
import { plainTable, withDb } from './shared.ts';

// `catraca nfse list|retry|cancel`: the notas fiscais (src/nfse, docs/nfse.md), as the console shows them.
// Retry and cancel change the note's row; the portal's issuer does the work within seconds.

const STATES = ['pending', 'issued', 'rejected', 'done', 'refused', 'outside_window', 'partial_refund'];

export async function nfseList(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['tenant', 'state', 'limit'], booleans: ['missing'] }, 'nfse list');
  const state = str(flags, 'state');
  if (state && !STATES.includes(state)) throw new UsageError(`nfse list: --state is one of ${STATES.join(', ')}`);
  const limit = Number(str(flags, 'limit') ?? 100);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError('nfse list: --limit is 1 to 10000');
  const tenantId = str(flags, 'tenant');
  if (flags.missing) {
    // the reconciliation: every credited top-up without an issued note, and why
    const rows = await withDb(ctx, (db) => reconcile(db, { problems: true, tenantId, limit }));
    const topups = rows.map((r) => ({
      charge_id: r.txid,
      tenant_id: r.tenant_id,
      amount: brlString(r.amount_micros),
      paid_at: r.paid_at.toISOString(),
      invoice_id: r.invoice_id,
      reason: r.reason,
    }));
    ctx.out(
      { topups },
      plainTable(
        ['CHARGE', 'TENANT', 'AMOUNT', 'PAID', 'REASON'],
        topups.map((t) => [t.charge_id, t.tenant_id, t.amount, `${t.paid_at.slice(0, 19)}Z`, t.reason]),
        [2],
        '(every credited top-up has its note)',
      ),
    );
    return;
  }
  const rows = await withDb(ctx, (db) => listInvoices(db, { tenantId, state, limit }));
  const invoices = rows.map((r) => ({
    id: r.id,
    tenant_id: r.tenant_id,
    kind: r.kind,
    charge_id: r.pix_txid,
    amount: brlString(r.amount_micros),
    state: r.state,
    cancel_state: r.cancel_state,
    number: r.nfse_number,
    access_key: r.access_key,
    dps: `${r.dps_serie}/${r.dps_number}`,
    attempts: r.attempts,
    error: r.error_code ? `${r.error_code}: ${r.error_message}` : r.error_message,
    cancel_note: r.cancel_note,
    issued_at: r.issued_at?.toISOString() ?? null,
    created_at: r.created_at.toISOString(),
  }));
  ctx.out(
    { invoices },
    plainTable(
      ['ID', 'TENANT', 'AMOUNT', 'STATE', 'NUMBER', 'ACCESS KEY', 'DETAIL'],
      invoices.map((i) => [
        i.id,
        i.tenant_id,
        i.amount,
        i.cancel_state ? `${i.state}/${i.cancel_state}` : i.state,
        i.number ?? '-',
        i.access_key ?? '-',
        (i.error ?? i.cancel_note ?? '').slice(0, 120),
      ]),
      [2],
      '(no notas fiscais)',
    ),
  );
}

export async function nfseRetry(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id'], required: ['id'] }, 'nfse retry');
  const id = str(flags, 'id')!;
  const did = await withDb(ctx, async (db) => {
    if (!(await getInvoice(db, id))) throw new CliError(`nfse retry: no nota fiscal ${id}`);
    return retryInvoice(db, id);
  });
  if (did === 'nothing') throw new CliError(`nfse retry: ${id} is neither rejected, waiting for Sefin, nor a refused cancellation`);
  ctx.out(
    { id, retry: did },
    did === 'issue' ? `${id}: issued again from the current settings and profile within seconds` : `${id}: cancellation sent again within seconds`,
  );
}

export async function nfseCancel(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['id', 'reason'], required: ['id', 'reason'] }, 'nfse cancel');
  const id = str(flags, 'id')!;
  const reason = str(flags, 'reason')!.trim();
  if (reason.length < 15 || reason.length > 255) throw new UsageError("nfse cancel: --reason must be 15 to 255 characters (the event's xMotivo)");
  const ok = await withDb(ctx, async (db) => {
    const inv = await getInvoice(db, id);
    if (!inv) throw new CliError(`nfse cancel: no nota fiscal ${id}`);
    return requestCancel(db, id, reason);
  });
  if (!ok) throw new CliError(`nfse cancel: ${id} is not an issued note that can be cancelled`);
  ctx.out({ id, cancel: 'requested' }, `${id}: the cancellation event is sent within seconds (see catraca nfse list)`);
}
