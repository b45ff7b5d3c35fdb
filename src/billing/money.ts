// Money is integer micro-reais (1 ledger unit = R$ 0.000001) held in bigint. Prices are BRL per
// 1M tokens, stored in the same unit (micro-BRL per 1M tokens = pico-BRL per token), so
//   cost_micros = ceil((input_tokens × input_price + output_tokens × output_price) / 1_000_000)
// is exact integer arithmetic with a single round-up at the end.
export const MICROS_PER_BRL = 1_000_000n;
const TOKENS_PER_PRICE_UNIT = 1_000_000n;

const DECIMAL = /^(\d{1,12})(?:[.,](\d{1,6}))?$/;

/** "12.34" → 12_340_000n. Up to 6 decimals; no sign, no exponent, no floats. */
export function parseBrl(text: string): bigint {
  const m = DECIMAL.exec(String(text).trim());
  if (!m) throw new RangeError(`not a BRL amount with at most 6 decimals: ${JSON.stringify(text)}`);
  return BigInt(m[1]) * MICROS_PER_BRL + BigInt((m[2] ?? '').padEnd(6, '0'));
}

/** 12_340_000n → "12.340000" (exact). */
export function formatBrl(micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  const s = `${abs / MICROS_PER_BRL}.${(abs % MICROS_PER_BRL).toString().padStart(6, '0')}`;
  return neg ? `-${s}` : s;
}

/** For JSON APIs that speak numbers (OpenRouter's schema): exact to 6 decimals below 2^53 micros. */
export function brlNumber(micros: bigint | number): number {
  return Number(micros) / 1e6;
}

/** pt-BR display: R$ 1.234,56 (rounded half-up to centavos, for display only). */
export function formatBrlPtBr(micros: bigint): string {
  const centavos = (micros + 5_000n) / 10_000n;
  const reais = (centavos / 100n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, '.');
  return `R$ ${reais},${(centavos % 100n).toString().padStart(2, '0')}`;
}

export interface Prices {
  /** micro-BRL per 1M input tokens */
  input: bigint;
  /** micro-BRL per 1M output tokens */
  output: bigint;
  /** micro-BRL per 1M input tokens read from the vendor's prompt cache (default: input) */
  cachedInput?: bigint;
  /** micro-BRL per 1M input tokens written to the vendor's prompt cache, default lifetime (default: input) */
  cacheWrite?: bigint;
  /** micro-BRL per 1M input tokens written to the vendor's prompt cache for one hour (default: input) */
  cacheWrite1h?: bigint;
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return a <= 0n ? 0n : (a + b - 1n) / b;
}

export function costMicros(inputTokens: number, outputTokens: number, prices: Prices): bigint {
  return ceilDiv(BigInt(inputTokens) * prices.input + BigInt(outputTokens) * prices.output, TOKENS_PER_PRICE_UNIT);
}

/**
 * The token counts of one request a price applies to, in OpenAI's convention: `prompt_tokens`
 * counts all input, cache reads and writes included; `completion_tokens` all output.
 */
export interface BilledTokens {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens?: number;
  cache_write_tokens?: number;
  cache_write_1h_tokens?: number;
}

/**
 * What one request costs the tenant — the one rule the front door and metering both apply: cache
 * reads at the cached-input price, cache writes at the write price of their lifetime, the rest of
 * the input at the input price (each at the input price where the catalog gives none), output at
 * the output price; one round-up at the end.
 */
export function usageCostMicros(usage: BilledTokens, prices: Prices): bigint {
  const cached = BigInt(usage.cached_tokens ?? 0);
  const write5m = BigInt(usage.cache_write_tokens ?? 0);
  const write1h = BigInt(usage.cache_write_1h_tokens ?? 0);
  let plain = BigInt(usage.prompt_tokens) - cached - write5m - write1h;
  if (plain < 0n) plain = 0n; // a vendor's parts that add up to more than its total: never a negative charge
  const picoBrl =
    plain * prices.input +
    cached * (prices.cachedInput ?? prices.input) +
    write5m * (prices.cacheWrite ?? prices.input) +
    write1h * (prices.cacheWrite1h ?? prices.input) +
    BigInt(usage.completion_tokens) * prices.output;
  return ceilDiv(picoBrl, TOKENS_PER_PRICE_UNIT);
}

/** Prices as the bus carries them (jobs, usage messages): decimal strings, cache prices only where set. */
export interface PriceStrings {
  input_price: string;
  output_price: string;
  cached_input_price?: string;
  cache_write_price?: string;
  cache_write_1h_price?: string;
}

export function priceStrings(p: Prices): PriceStrings {
  const w: PriceStrings = { input_price: p.input.toString(), output_price: p.output.toString() };
  if (p.cachedInput !== undefined) w.cached_input_price = p.cachedInput.toString();
  if (p.cacheWrite !== undefined) w.cache_write_price = p.cacheWrite.toString();
  if (p.cacheWrite1h !== undefined) w.cache_write_1h_price = p.cacheWrite1h.toString();
  return w;
}

export function pricesOfStrings(w: PriceStrings): Prices {
  const p: Prices = { input: BigInt(w.input_price), output: BigInt(w.output_price) };
  if (w.cached_input_price !== undefined) p.cachedInput = BigInt(w.cached_input_price);
  if (w.cache_write_price !== undefined) p.cacheWrite = BigInt(w.cache_write_price);
  if (w.cache_write_1h_price !== undefined) p.cacheWrite1h = BigInt(w.cache_write_1h_price);
  return p;
}

/** Whether two sets of prices are the same (a job's, and a worker's catalog entry's). */
export function samePrices(a: PriceStrings, b: PriceStrings): boolean {
  return (
    a.input_price === b.input_price &&
    a.output_price === b.output_price &&
    a.cached_input_price === b.cached_input_price &&
    a.cache_write_price === b.cache_write_price &&
    a.cache_write_1h_price === b.cache_write_1h_price
  );
}

/**
 * Prices for a worst-case hold: every input token at the dearest input price the vendor may bill
 * it at (a cache write costs more than plain input), so the hold bounds whatever the vendor reports.
 */
export function holdPrices(prices: Prices): Prices {
  let input = prices.input;
  for (const p of [prices.cachedInput, prices.cacheWrite, prices.cacheWrite1h]) if (p !== undefined && p > input) input = p;
  return { input, output: prices.output };
}

/** Largest number of output tokens whose total cost with `inputTokens` fits in `budget` micros. */
export function affordableOutputTokens(budget: bigint, inputTokens: number, prices: Prices, cap: number): number {
  const room = budget * TOKENS_PER_PRICE_UNIT - BigInt(inputTokens) * prices.input;
  if (room < 0n) return -1;
  if (prices.output === 0n) return cap;
  const t = room / prices.output;
  return t > BigInt(cap) ? cap : Number(t);
}
