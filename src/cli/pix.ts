// `catraca pix pay --txid X [--valor 12.34]`: development only. Pays a charge at the built-in PSP
// simulator of the running portal, which then calls the portal's webhook like a real PSP.
// Wire it in src/cli/main.ts as  'pix pay': pixPay.
import { createPool } from '../db/pool.ts';
import { paySimulatedCharge } from '../pix/simulator/pay.ts';
import { connect as natsConnect } from 'nats';
import { natsOptions } from '../bus/connect.ts';
import { subjects } from '../bus/subjects.ts';
import { brlString, parseFlags, str } from './args.ts';
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

/**
 * `catraca pix recurring run`: the pass that schedules the Pix Automático charges whose time has
 * come (and asks the PSP about recurrences and open charges first). The portal holds the PSP
 * session, so the CLI asks it over NATS and prints what it did.
 */
export async function pixRecurringRun(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'pix recurring run');
  const natsUrl = ctx.natsUrl();
  if (!natsUrl) throw new CliError('pix recurring run: NATS_URL is not set and no stack is running (the portal runs the pass)');
  const nc = await natsConnect({ ...natsOptions(natsUrl), timeout: 3000, reconnect: false, name: 'catraca-cli' });
  let answer: RunAnswer;
  try {
    const msg = await nc.request(subjects.pixRecurringRun, new Uint8Array(), { timeout: 60_000 });
    answer = JSON.parse(Buffer.from(msg.data).toString('utf8')) as RunAnswer;
  } catch (err) {
    throw new CliError(`pix recurring run: no portal answered (${(err as Error).message})`);
  } finally {
    await nc.close();
  }
  if (!answer.ok) throw new CliError(`pix recurring run: ${answer.error}`);
  const lines = answer.scheduled.map((s) =>
    s.txid
      ? `${s.tenant_id}: charge ${s.txid} of R$ ${brlString(BigInt(s.amount_micros!))} due ${s.due_date} (${s.rule})`
      : `${s.tenant_id}: no charge for the period due ${s.due_date} (projected balance R$ ${brlString(BigInt(s.projected_micros))} stays at or above the target)`,
  );
  ctx.out(answer, [`${answer.checked} recurrence(s) due, ${answer.scheduled.length} period(s) handled, ${answer.failed} failed`, ...lines].join('\n'));
  if (answer.failed > 0) throw new CliError(`pix recurring run: ${answer.failed} recurrence(s) could not be scheduled (see the portal's log)`);
}

type RunAnswer =
  | { ok: false; error: string }
  | {
      ok: true;
      checked: number;
      failed: number;
      scheduled: {
        id_rec: string;
        tenant_id: string;
        due_date: string;
        txid: string | null;
        amount_micros: string | null;
        projected_micros: string;
        rule: string;
      }[];
    };

/** Dispatcher for `catraca pix <sub> …`. */
export async function runPix(ctx: CliContext, args: string[]): Promise<void> {
  const [sub, ...rest] = args;
  if (sub === 'pay') return pixPay(ctx, rest);
  if (sub === 'recurring' && rest[0] === 'run') return pixRecurringRun(ctx, rest.slice(1));
  throw new UsageError(`pix: unknown command ${JSON.stringify(sub ?? '')} (try: pix pay --txid X)`);
}
