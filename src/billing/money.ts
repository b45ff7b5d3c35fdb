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
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return a <= 0n ? 0n : (a + b - 1n) / b;
}

export function costMicros(inputTokens: number, outputTokens: number, prices: Prices): bigint {
  return ceilDiv(BigInt(inputTokens) * prices.input + BigInt(outputTokens) * prices.output, TOKENS_PER_PRICE_UNIT);
}

/** Largest number of output tokens whose total cost with `inputTokens` fits in `budget` micros. */
export function affordableOutputTokens(budget: bigint, inputTokens: number, prices: Prices, cap: number): number {
  const room = budget * TOKENS_PER_PRICE_UNIT - BigInt(inputTokens) * prices.input;
  if (room < 0n) return -1;
  if (prices.output === 0n) return cap;
  const t = room / prices.output;
  return t > BigInt(cap) ? cap : Number(t);
}
