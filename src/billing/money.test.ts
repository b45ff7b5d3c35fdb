import { describe, expect, it, test } from 'vitest';
import { affordableOutputTokens, costMicros, formatBrl, formatBrlPtBr, holdPrices, parseBrl, priceStrings, pricesOfStrings, usageCostMicros } from './money.ts';

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

describe('usageCostMicros: prompt caching at its own prices', () => {
  // an Anthropic-like price list, BRL per 1M tokens: input 15, cache read 1.50, 5-minute write 18.75, 1-hour write 30, output 75
  const prices = { input: 15_000_000n, output: 75_000_000n, cachedInput: 1_500_000n, cacheWrite: 18_750_000n, cacheWrite1h: 30_000_000n };
  const usage = { prompt_tokens: 100_000, completion_tokens: 1_000, cached_tokens: 80_000, cache_write_tokens: 10_000, cache_write_1h_tokens: 5_000 };

  test('each part of the input at its price, one round-up at the end', () => {
    // 5 000 × 15 + 80 000 × 1.5 + 10 000 × 18.75 + 5 000 × 30 + 1 000 × 75 = 607 500 micro-BRL
    expect(usageCostMicros(usage, prices)).toBe(607_500n);
    expect(usageCostMicros({ prompt_tokens: 1, completion_tokens: 0, cached_tokens: 1 }, prices)).toBe(2n); // 1.5 µBRL, rounded up
  });

  test('without cache prices every input token costs the input price (as before)', () => {
    expect(usageCostMicros(usage, { input: 15_000_000n, output: 75_000_000n })).toBe(1_575_000n);
    expect(usageCostMicros(usage, { input: 15_000_000n, output: 75_000_000n })).toBe(costMicros(100_000, 1_000, { input: 15_000_000n, output: 75_000_000n }));
  });

  test('parts that add up to more than the prompt never make a negative charge', () => {
    expect(usageCostMicros({ prompt_tokens: 10, completion_tokens: 0, cached_tokens: 20 }, prices)).toBe(30n);
  });

  test('a hold prices every input token at the dearest input price', () => {
    expect(holdPrices(prices)).toEqual({ input: 30_000_000n, output: 75_000_000n });
    expect(holdPrices({ input: 2n, output: 3n, cachedInput: 1n })).toEqual({ input: 2n, output: 3n });
    // so the worst case bounds any mix of cache writes the vendor may report
    const held = costMicros(usage.prompt_tokens, usage.completion_tokens, holdPrices(prices));
    expect(held).toBeGreaterThanOrEqual(usageCostMicros(usage, prices));
  });

  test('prices survive the bus as strings', () => {
    expect(pricesOfStrings(priceStrings(prices))).toEqual(prices);
    expect(priceStrings({ input: 1n, output: 2n })).toEqual({ input_price: '1', output_price: '2' });
  });
});
