// `catraca pix pay --txid X [--valor 12.34]`: development only. Pays a charge at the built-in PSP
// simulator of the running portal, which then calls the portal's webhook like a real PSP.
// Wire it in src/cli/main.ts as  'pix pay': pixPay.
import { createPool } from '../db/pool.ts';
import { paySimulatedCharge } from '../pix/simulator/pay.ts';
import { parseFlags, str } from './args.ts';
import { CliError, UsageError, type CliContext } from './context.ts';

export async function pixPay(ctx: CliContext, args: string[]): Promise<void> {
  const flags = parseFlags(args, { values: ['txid', 'valor'], required: ['txid'] }, 'pix pay');
  const txid = str(flags, 'txid')!;
  const valor = str(flags, 'valor');
  if (!/^[a-zA-Z0-9]{26,35}$/.test(txid)) throw new UsageError('pix pay: --txid must match [a-zA-Z0-9]{26,35}');
  if (valor !== undefined && !/^\d{1,10}\.\d{2}$/.test(valor)) throw new UsageError('pix pay: --valor must look like 12.34');
  const db = createPool(ctx.databaseUrl(), 1);
  try {
    const r = await paySimulatedCharge(db, { txid, valor });
    if (!r.ok) throw new CliError(`pix pay: ${r.error ?? `simulator answered HTTP ${r.status}`}`);
    if (!r.delivered) ctx.warn('paid at the simulator, but the webhook was not delivered; the portal will find the payment by reconciliation');
    ctx.out({ txid, paid: true, end_to_end_id: r.endToEndId, webhook_delivered: r.delivered }, `paid ${txid} (endToEndId ${r.endToEndId})`);
  } finally {
    await db.end();
  }
}

/** Dispatcher for `catraca pix <sub> …`. */
export async function runPix(ctx: CliContext, args: string[]): Promise<void> {
  const [sub, ...rest] = args;
  if (sub === 'pay') return pixPay(ctx, rest);
  throw new UsageError(`pix: unknown command ${JSON.stringify(sub ?? '')} (try: pix pay --txid X)`);
}
