// `catraca fx pin --rate 5.4321` / `catraca fx pin --clear`: the dollar's rate USD-priced models are
// sold at, pinned by an operator instead of the day's PTAX (docs/billing.md, "Prices in dollars").
import { subjects } from '../bus/subjects.ts';
import { parseAmountInput } from '../billing/amount-input.ts';
import { pinRate, unpinRate } from '../fx/service.ts';
import { brlString, parseFlags, str } from './args.ts';
import { type CliContext, UsageError } from './context.ts';
import { broadcast, withDb } from './commands/shared.ts';

export async function fxPin(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'fx pin';
  const flags = parseFlags(args, { values: ['rate'], booleans: ['clear'] }, cmd);
  const text = str(flags, 'rate');
  const clear = flags.clear === true;
  if ((text === undefined) === !clear) throw new UsageError(`${cmd}: --rate R$_PER_USD (like 5.4321) or --clear`);
  if (clear) {
    await withDb(ctx, (db) => unpinRate(db, 'cli'));
    ctx.out({ pinned: null }, 'rate unpinned: the console takes the last published PTAX within a minute and recomputes the prices');
    return;
  }
  const r = parseAmountInput(text!, { maxDecimals: 6 });
  if (!r.ok || r.micros <= 0n) throw new UsageError(`${cmd}: --rate is reais per dollar like 5.4321`);
  const out = await withDb(ctx, (db) => pinRate(db, r.micros, 'cli'));
  ctx.out(
    { pinned: brlString(r.micros), models_changed: out.changed },
    `rate pinned at R$ ${brlString(r.micros)} per dollar; ${out.changed.length} model(s) repriced`,
  );
  for (const model of out.changed)
    await broadcast(ctx, subjects.catalogChanged, { model }, `${model} repriced`, 'front doors and workers reload their catalogs within 5 s');
}
