// USD vendor prices with a markup on `model set` and `model deployment add` (docs/billing.md,
// "Prices in dollars"): the BRL prices are computed at the current rate (src/fx/service.ts) and
// recomputed by the console at each new PTAX.
import { parseAmountInput } from '../../billing/amount-input.ts';
import type { DbClient } from '../../db/pool.ts';
import { brlPrices, currentRate, type UsdPrice } from '../../fx/service.ts';
import { parseMarkup } from '../../fx/ptax.ts';
import { type Flags, str } from '../args.ts';
import { CliError, UsageError } from '../context.ts';

export const USD_FLAGS = ['usd-input-price', 'usd-output-price', 'usd-cached-input-price', 'usd-cache-write-price', 'usd-cache-write-1h-price', 'markup'];

type GivenUsd = Omit<UsdPrice, 'model_id' | 'deployment'>;

function usdFlag(flags: Flags, name: string, cmd: string): bigint | null {
  const v = str(flags, name);
  if (v === undefined || v === '' || v === 'none') return null;
  const r = parseAmountInput(v, { maxDecimals: 6 });
  if (!r.ok) throw new UsageError(`${cmd}: --${name} must be a USD amount per 1M tokens like 3.00: ${r.message}`);
  return r.micros;
}

/** The USD prices given (null: none given, the entry is priced in BRL). */
export function usdFlags(flags: Flags, cmd: string, brlGiven: boolean): GivenUsd | null {
  const any = USD_FLAGS.some((f) => str(flags, f) !== undefined);
  if (!any) return null;
  if (brlGiven) throw new UsageError(`${cmd}: give the prices in BRL (--input-price …) or in USD (--usd-input-price …), not both`);
  const input = usdFlag(flags, 'usd-input-price', cmd);
  const output = usdFlag(flags, 'usd-output-price', cmd);
  if (input === null || output === null) throw new UsageError(`${cmd}: --usd-input-price and --usd-output-price go together`);
  const markupText = str(flags, 'markup');
  const markup = markupText === undefined ? 1_000_000n : parseMarkup(markupText);
  if (markup === null) throw new UsageError(`${cmd}: --markup is a factor from 1 to 100 with up to 6 decimals, like 1.30`);
  return {
    input_usd: input,
    output_usd: output,
    cached_input_usd: usdFlag(flags, 'usd-cached-input-price', cmd),
    cache_write_usd: usdFlag(flags, 'usd-cache-write-price', cmd),
    cache_write_1h_usd: usdFlag(flags, 'usd-cache-write-1h-price', cmd),
    markup_ppm: markup,
  };
}

/** The BRL prices of `usd` at the current rate; refused when catraca has no rate yet. */
export async function usdToBrl(db: DbClient, usd: GivenUsd, cmd: string) {
  const rate = await currentRate(db);
  if (!rate)
    throw new CliError(`${cmd}: no dollar rate yet: the console takes the PTAX when it starts (PTAX_URL), or pin one with catraca fx pin --rate 5.4321`);
  return { rate, prices: brlPrices({ model_id: '', deployment: '', ...usd }, rate.micros) };
}

/** Records (or, with null, forgets) the USD prices of a model ('primary') or deployment. */
export async function saveUsdPrices(db: DbClient, modelId: string, deployment: string, usd: GivenUsd | null, rate?: { micros: bigint; date: string }) {
  if (!usd) {
    await db.query('delete from model_usd_prices where model_id = $1 and deployment = $2', [modelId, deployment]);
    return;
  }
  await db.query(
    `insert into model_usd_prices (model_id, deployment, input_usd, output_usd, cached_input_usd, cache_write_usd, cache_write_1h_usd, markup_ppm, rate_micros, rate_date, priced_at)
     values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10, now())
     on conflict (model_id, deployment) do update set input_usd = excluded.input_usd, output_usd = excluded.output_usd, cached_input_usd = excluded.cached_input_usd,
       cache_write_usd = excluded.cache_write_usd, cache_write_1h_usd = excluded.cache_write_1h_usd, markup_ppm = excluded.markup_ppm,
       rate_micros = excluded.rate_micros, rate_date = excluded.rate_date, priced_at = now()`,
    [
      modelId,
      deployment,
      usd.input_usd,
      usd.output_usd,
      usd.cached_input_usd,
      usd.cache_write_usd,
      usd.cache_write_1h_usd,
      usd.markup_ppm,
      rate?.micros,
      rate?.date,
    ],
  );
}
