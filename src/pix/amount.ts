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

/** User input ("50", "50,00", "1.234,56", "50.00") → micro-BRL; null if it is not whole centavos. */
export function parseUserAmount(text: string): bigint | null {
  let t = String(text ?? '').trim().replace(/^R\$\s*/i, '');
  if (/^\d{1,3}(\.\d{3})+(,\d{1,2})?$/.test(t)) t = t.replace(/\./g, ''); // 1.234,56
  t = t.replace(',', '.');
  if (!/^\d{1,10}(\.\d{1,2})?$/.test(t)) return null;
  const micros = parseBrl(t);
  return micros % CENTAVO_MICROS === 0n ? micros : null;
}

export const brl = (reais: number | bigint) => BigInt(reais) * MICROS_PER_BRL;
