import { describe, expect, it } from 'vitest';
import { parseAmountInput } from './amount-input.ts';
import { parseUserAmount, parseUserAmountInput } from '../pix/amount.ts';

const ok = (t: string, maxDecimals = 6) => {
  const r = parseAmountInput(t, { maxDecimals });
  if (!r.ok) throw new Error(`${t}: ${r.message}`);
  return r.micros;
};
const err = (t: string, maxDecimals = 6) => {
  const r = parseAmountInput(t, { maxDecimals });
  return r.ok ? `accepted as ${r.micros}` : r.error;
};

describe('amounts typed by people: no thousands separators, never ×1000 or ÷1000', () => {
  it('accepts plain decimals with one dot or one comma, up to 6 decimals', () => {
    expect(ok('12')).toBe(12_000_000n);
    expect(ok('12.34')).toBe(12_340_000n);
    expect(ok('12,34')).toBe(12_340_000n);
    expect(ok('1,5')).toBe(1_500_000n);
    expect(ok('1.5000')).toBe(1_500_000n);
    expect(ok('1000.50')).toBe(1_000_500_000n);
    expect(ok('0.825')).toBe(825_000n); // three decimals below 1: nobody groups thousands after a 0
    expect(ok('0,000001')).toBe(1n);
    expect(ok(' 7 ')).toBe(7_000_000n);
  });

  it('refuses thousands separators and the ambiguous "separator + exactly three digits"', () => {
    expect(err('1.000,00')).toBe('thousands_separator');
    expect(err('1,000.00')).toBe('thousands_separator');
    expect(err('1 000')).toBe('thousands_separator');
    expect(err('1.000.000')).toBe('thousands_separator');
    expect(err('1.000')).toBe('ambiguous');
    expect(err('1,000')).toBe('ambiguous');
    expect(err('1.500')).toBe('ambiguous');
    expect(err('999,999')).toBe('ambiguous');
    expect(err('1000.500')).toBe('ambiguous');
    expect(err('1.0000001')).toBe('too_many_decimals');
    expect(err('-5')).toBe('not_a_number');
    expect(err('1e3')).toBe('not_a_number');
    expect(err('R$ 5')).toBe('not_a_number');
    expect(err('')).toBe('empty');
    expect(err('1234567890123')).toBe('too_large');
    const r = parseAmountInput('1.500');
    expect(r.ok ? '' : r.message).toBe(
      '"1.500" is ambiguous: a dot followed by exactly three digits reads as a thousands separator in pt-BR and as a decimal separator in en-US; write 1500 for the thousands, or 1.5000 for the decimals',
    );
  });

  it('the portal parser follows the same rule, in whole centavos', () => {
    expect(parseUserAmount('50,00')).toBe(50_000_000n);
    expect(parseUserAmount('50.00')).toBe(50_000_000n);
    expect(parseUserAmount('R$ 5')).toBe(5_000_000n);
    expect(parseUserAmount('1500')).toBe(1_500_000_000n);
    expect(parseUserAmount('1.234,56')).toBe(null);
    expect(parseUserAmount('5.001')).toBe(null);
    expect(parseUserAmount('5.000')).toBe(null);
    expect(parseUserAmount('5,001')).toBe(null);
    expect(parseUserAmount('0,125')).toBe(null);
    expect(parseUserAmountInput('5.000,01')).toMatchObject({ ok: false, error: 'thousands_separator' });
    expect(parseUserAmountInput('5.000')).toMatchObject({ ok: false, error: 'ambiguous' });
    expect(parseUserAmountInput('0,125')).toMatchObject({ ok: false, error: 'too_many_decimals' });
  });
});
