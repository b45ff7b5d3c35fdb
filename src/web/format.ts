import { formatBrlPtBr } from '../billing/money.ts';
import type { Lang } from './i18n.ts';

export const TIMEZONE = 'America/Sao_Paulo';

/** R$ 1.234,56 (pt-BR) or R$ 1,234.56 (en); display only, rounded to centavos. */
export function money(lang: Lang, micros: bigint): string {
  const neg = micros < 0n;
  const s = formatBrlPtBr(neg ? -micros : micros);
  const out = lang === 'en' ? s.replace(/[.,]/g, (c) => (c === '.' ? ',' : '.')) : s;
  return neg ? `-${out}` : out;
}

/** Prices per 1M tokens keep up to 6 decimals (at least 2): R$ 0,15 or R$ 0,0005. */
export function price(lang: Lang, micros: bigint): string {
  const reais = micros / 1_000_000n;
  let frac = (micros % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  if (frac.length < 2) frac = frac.padEnd(2, '0');
  const int = reais.toString().replace(/\B(?=(\d{3})+(?!\d))/g, lang === 'en' ? ',' : '.');
  return `R$ ${int}${lang === 'en' ? '.' : ','}${frac}`;
}

export function dateTime(lang: Lang, d: Date | null): string {
  if (!d) return '';
  return new Intl.DateTimeFormat(lang, { dateStyle: 'short', timeStyle: 'short', timeZone: TIMEZONE }).format(d);
}

export function time(lang: Lang, d: Date): string {
  return new Intl.DateTimeFormat(lang, { dateStyle: 'short', timeStyle: 'medium', timeZone: TIMEZONE }).format(d);
}

export function int(lang: Lang, n: number | bigint): string {
  return new Intl.NumberFormat(lang).format(n);
}

/** Spend and ledger amounts: centavos, with up to 6 decimals when smaller units matter (R$ 0,000012). */
export function amount(lang: Lang, micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  const out = abs % 10_000n === 0n ? money(lang, abs) : price(lang, abs);
  return neg ? `-${out}` : out;
}
