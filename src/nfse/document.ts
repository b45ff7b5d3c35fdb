// CPF and CNPJ: what a tenant types in "CNPJ ou CPF" (with or without punctuation), checked by
// their check digits. The CNPJ may be alphanumeric (Receita Federal, IN RFB 2.229/2024, issued from
// July 2026): 12 characters [0-9A-Z] then 2 numeric check digits, each character worth its ASCII
// code minus 48 in the same modulo-11 sums as the numeric one, so a numeric CNPJ checks the same way.

export type FederalDocument = { kind: 'cpf' | 'cnpj'; value: string };

const PUNCTUATION = /[\s./-]/g;

/** The document without its punctuation, upper-cased; null when it is neither a CPF nor a CNPJ (wrong shape or check digits). */
export function parseDocument(input: string): FederalDocument | null {
  const v = input.replace(PUNCTUATION, '').toUpperCase();
  if (/^\d{11}$/.test(v)) return isCpf(v) ? { kind: 'cpf', value: v } : null;
  if (/^[0-9A-Z]{12}\d{2}$/.test(v)) return isCnpj(v) ? { kind: 'cnpj', value: v } : null;
  return null;
}

/** A CPF of 11 digits with valid check digits (never one repeated digit). */
export function isCpf(v: string): boolean {
  if (!/^\d{11}$/.test(v) || /^(\d)\1{10}$/.test(v)) return false;
  const digit = (n: number) => {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += Number(v[i]) * (n + 1 - i);
    const r = (sum * 10) % 11;
    return r === 10 ? 0 : r;
  };
  return digit(9) === Number(v[9]) && digit(10) === Number(v[10]);
}

/** A CNPJ (numeric or alphanumeric) with valid check digits (never all zeros or one repeated character). */
export function isCnpj(v: string): boolean {
  if (!/^[0-9A-Z]{12}\d{2}$/.test(v) || /^(.)\1{13}$/.test(v)) return false;
  return cnpjCheckDigits(v.slice(0, 12)) === v.slice(12);
}

/** The two check digits of the first 12 characters of a CNPJ. */
export function cnpjCheckDigits(base: string): string {
  const digit = (s: string) => {
    let sum = 0;
    let weight = 2;
    for (let i = s.length - 1; i >= 0; i--) {
      sum += (s.charCodeAt(i) - 48) * weight;
      weight = weight === 9 ? 2 : weight + 1;
    }
    const r = sum % 11;
    return r < 2 ? 0 : 11 - r;
  };
  const d1 = digit(base);
  const d2 = digit(base + d1);
  return `${d1}${d2}`;
}

/** 12.345.678/0001-95, 123.456.789-09 */
export function formatDocument(d: FederalDocument): string {
  const v = d.value;
  return d.kind === 'cpf'
    ? `${v.slice(0, 3)}.${v.slice(3, 6)}.${v.slice(6, 9)}-${v.slice(9)}`
    : `${v.slice(0, 2)}.${v.slice(2, 5)}.${v.slice(5, 8)}/${v.slice(8, 12)}-${v.slice(12)}`;
}
