/** micro-BRL → the layout's decimal with 2 places ("20.00"); the amount must be whole centavos. */
export function decimal2(micros: bigint): string {
  if (micros < 0n || micros % 10_000n !== 0n) throw new Error(`not a whole number of centavos: ${micros} micro-BRL`);
  const cents = micros / 10_000n;
  return `${cents / 100n}.${(cents % 100n).toString().padStart(2, '0')}`;
}

/** "2.00" (a percentage, as NFSE_ISS_RATE is written) → "2.00"; null when it is not 0–9.99 with at most 2 decimals. */
export function percent1v2(text: string): string | null {
  const m = /^(\d)(?:[.,](\d{1,2}))?$/.exec(text.trim());
  return m ? `${m[1]}.${(m[2] ?? '').padEnd(2, '0')}` : null;
}
