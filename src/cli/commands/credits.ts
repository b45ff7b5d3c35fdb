import { credit } from '../../billing/ledger.ts';
import { checkBalances } from '../../notify/events.ts';
import { brlFlag, brlString, parseFlags, str } from '../args.ts';
import { CliError, UsageError, type CliContext } from '../context.ts';
import { requireTenant, withDb } from './shared.ts';

export async function creditsGrant(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'credits grant';
  const flags = parseFlags(args, { values: ['tenant', 'amount', 'note', 'external-id'], required: ['tenant', 'amount'] }, cmd);
  const amount = brlFlag(flags, 'amount', cmd)!;
  if (amount <= 0n) throw new UsageError(`${cmd}: --amount must be greater than zero`);
  const tenantId = str(flags, 'tenant')!;
  const externalId = str(flags, 'external-id');
  const res = await withDb(ctx, async (db) => {
    await requireTenant(db, tenantId);
    const r = await credit(db, { tenantId, amountMicros: amount, source: 'grant', externalId: externalId ?? null, note: str(flags, 'note') ?? null });
    // the balance is back above a low-balance threshold: the next crossing is announced again (src/notify)
    if (r.status === 'credited') await checkBalances(db, [tenantId]);
    return r;
  });
  if (res.status === 'unknown_tenant') throw new CliError(`no tenant with id ${JSON.stringify(tenantId)}`);
  const value: Record<string, unknown> = { tenant: tenantId, balance: brlString(res.balance) };
  if (res.status === 'duplicate') value.duplicate = true;
  ctx.out(
    value,
    res.status === 'duplicate'
      ? `already granted (external id ${externalId}); balance of ${tenantId}: R$ ${brlString(res.balance)}`
      : `granted R$ ${brlString(amount)} to ${tenantId}; balance: R$ ${brlString(res.balance)}`,
  );
}
