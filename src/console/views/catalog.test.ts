import { describe, expect, it } from 'vitest';
import { parseAmountInput } from '../../billing/amount-input.ts';
import { priceValue } from './catalog.ts';

describe('priceValue', () => {
  it('writes prices so that the form can send them back as they are', () => {
    const cases: Array<[bigint | null, string]> = [
      [null, ''],
      [0n, '0'],
      [100_000_000n, '100'],
      [2_500_000n, '2.5'],
      [1_125_000n, '1.1250'],
      [125_000n, '0.125'],
      [1_000_001n, '1.000001'],
      [12_345_600n, '12.3456'],
    ];
    for (const [micros, text] of cases) {
      expect(priceValue(micros)).toBe(text);
      if (micros !== null) expect(parseAmountInput(text)).toEqual({ ok: true, micros });
    }
  });
});
