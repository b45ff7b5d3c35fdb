import { describe, expect, it } from 'vitest';
import { affordableOutputTokens, costMicros, formatBrl, formatBrlPtBr, parseBrl } from './money.ts';

describe('money', () => {
  it('parses BRL decimal strings to integer micro-reais, refusing anything inexact', () => {
    expect(parseBrl('12.34')).toBe(12_340_000n);
    expect(parseBrl('0,000001')).toBe(1n);
    expect(parseBrl('5000')).toBe(5_000_000_000n);
    for (const bad of ['1.0000001', '-1', '1e3', '', 'abc', '1.2.3']) expect(() => parseBrl(bad)).toThrow(RangeError);
  });

  it('formats exactly, and for pt-BR display', () => {
    expect(formatBrl(112_340_000n)).toBe('112.340000');
    expect(formatBrl(1n)).toBe('0.000001');
    expect(formatBrlPtBr(123_456_789_000n)).toBe('R$ 123.456,79');
    expect(formatBrlPtBr(50_000_000n)).toBe('R$ 50,00');
  });

  it('rounds the cost up once per request', () => {
    const p = { input: 1_000_000n, output: 2_000_000n }; // R$ 1 / R$ 2 per 1M tokens
    expect(costMicros(8, 2, p)).toBe(12n);
    expect(costMicros(1, 0, { input: 1n, output: 0n })).toBe(1n); // 1e-12 BRL → 1 µBRL
    expect(costMicros(0, 0, p)).toBe(0n);
    expect(costMicros(1_000_000, 1_000_000, { input: 150_000_000n, output: 600_000_000n })).toBe(750_000_000n);
  });

  it('finds the largest affordable output', () => {
    const p = { input: 1_000_000n, output: 2_000_000n };
    expect(affordableOutputTokens(100n, 22, p, 4000)).toBe(39);
    expect(affordableOutputTokens(10n, 22, p, 4000)).toBe(-1);
    expect(affordableOutputTokens(1_000_000n, 0, p, 4096)).toBe(4096);
  });
});
