import { describe, expect, it } from 'vitest';
import { safeText } from '../web/csv.ts';
import { count } from './csv.ts';
import { axisStep, longDay, shortDay } from './views/usage.ts';

describe('CSV cells', () => {
  it('text a spreadsheet would run as a formula gets a leading apostrophe (OWASP CSV injection)', () => {
    for (const v of ['=1+1', '+55 11', '-2', '@SUM(A1)', '\tx', '\rx', '=HYPERLINK("http://x")']) expect(safeText(v)).toBe(`'${v}`);
    for (const v of ['plain', 'a=b', ' =1', '1-2', "'quoted", '']) expect(safeText(v)).toBe(v);
    expect(safeText(null)).toBe('');
    expect(safeText(undefined)).toBe('');
  });
  it('counts', () => {
    expect(count(null)).toBe('');
    expect(count(0)).toBe('0');
    expect(count(12345678901234567890n)).toBe('12345678901234567890');
  });
});

describe('chart helpers', () => {
  it('axis steps of 1, 2 or 5 × 10^k micro-reais', () => {
    expect(axisStep(1_234_572n, 4)).toBe(500_000n);
    expect(axisStep(2_000_000n, 4)).toBe(500_000n);
    expect(axisStep(2_000_001n, 4)).toBe(1_000_000n);
    expect(axisStep(1n, 4)).toBe(1n);
    expect(axisStep(9n, 4)).toBe(5n);
    expect(axisStep(11_730_000n, 4)).toBe(5_000_000n);
  });
  it('day labels: dd/mm in pt-BR, Mar 1 in English, whatever the machine zone', () => {
    expect(shortDay('pt-BR', '2025-03-01')).toBe('01/03');
    expect(shortDay('en', '2025-03-01')).toBe('Mar 1');
    expect(longDay('pt-BR', '2025-12-31')).toBe('31/12/2025');
    expect(longDay('en', '2025-12-31')).toBe('Dec 31, 2025');
  });
});
