import { parseAmountInput, type AmountInputResult } from '../billing/amount-input.ts';
import { MICROS_PER_BRL, parseBrl } from '../billing/money.ts';
import { CENTAVO_MICROS } from './limits.ts';

const VALOR_RE = /^\d{1,10}\.\d{2}$/;

/** micro-BRL (whole centavos) → the API Pix amount string "123.45". */
export function toValor(micros: bigint): string {
  if (micros < 0n || micros % CENTAVO_MICROS !== 0n) throw new RangeError('Pix amounts are whole centavos');
  const c = micros / CENTAVO_MICROS;
  return `${c / 100n}.${(c % 100n).toString().padStart(2, '0')}`;
}

/** The API Pix amount string "123.45" → micro-BRL. Throws on anything else. */
export function fromValor(valor: string): bigint {
  if (typeof valor !== 'string' || !VALOR_RE.test(valor)) throw new RangeError(`not an API Pix amount: ${JSON.stringify(valor)}`);
  return parseBrl(valor);
}

/**
 * User input in the portal ("50", "50,00", "50.00", "R$ 5") → micro-BRL, whole centavos. The same
 * rule as every CLI amount (src/billing/amount-input.ts): no thousands separators ("1.234,56" and
 * "5.001" are refused, never read as thousands), at most 2 decimals.
 */
export function parseUserAmountInput(text: string): AmountInputResult {
  const t = String(text ?? '')
    .trim()
    .replace(/^R\$\s*/i, '');
  return parseAmountInput(t, { maxDecimals: 2, maxIntegerDigits: 10 });
}

/** As parseUserAmountInput; null when refused. */
export function parseUserAmount(text: string): bigint | null {
  const r = parseUserAmountInput(text);
  return r.ok && r.micros % CENTAVO_MICROS === 0n ? r.micros : null;
}

export const brl = (reais: number | bigint) => BigInt(reais) * MICROS_PER_BRL;
