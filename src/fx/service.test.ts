import { describe, expect, it } from 'vitest';
import { brlPrices, ptaxDue } from './service.ts';

// The PTAX job's calendar (São Paulo is UTC−3 all year) and the five prices of a USD entry.
describe('ptaxDue: once a business day after PTAX_HOUR, São Paulo time', () => {
  const ptax = { source: 'ptax' as const };
  const fresh = { failingSince: null, pinnedMicros: null, lastRunDate: '2026-11-26' };
  const at = (iso: string) => new Date(iso);

  it('a business day: not before the hour, from the hour on, not twice the same day', () => {
    // Friday 27/11/2026
    expect(ptaxDue(at('2026-11-27T16:59:00Z'), 14, fresh, ptax)).toBe(false); // 13:59 in São Paulo
    expect(ptaxDue(at('2026-11-27T17:00:00Z'), 14, fresh, ptax)).toBe(true); // 14:00
    expect(ptaxDue(at('2026-11-28T02:30:00Z'), 14, fresh, ptax)).toBe(true); // 23:30, still Friday there
    expect(ptaxDue(at('2026-11-27T17:00:00Z'), 14, { ...fresh, lastRunDate: '2026-11-27' }, ptax)).toBe(false);
    expect(ptaxDue(at('2026-11-27T03:00:00Z'), 0, fresh, ptax)).toBe(true); // PTAX_HOUR=0: from midnight
  });

  it('weekends: nothing, unless there is no rate yet or a pinned rate was just cleared', () => {
    const saturday = at('2026-11-28T18:00:00Z');
    const sunday = at('2026-11-29T18:00:00Z');
    expect(ptaxDue(saturday, 14, fresh, ptax)).toBe(false);
    expect(ptaxDue(sunday, 14, fresh, ptax)).toBe(false);
    expect(ptaxDue(at('2026-11-28T02:59:00Z'), 14, fresh, ptax)).toBe(true); // Friday 23:59 in São Paulo
    expect(ptaxDue(saturday, 14, fresh, null)).toBe(true);
    expect(ptaxDue(saturday, 14, fresh, { source: 'pinned' })).toBe(true); // pinned rate in force, pin cleared
    expect(ptaxDue(saturday, 14, { ...fresh, pinnedMicros: 5_000_000n }, { source: 'pinned' })).toBe(false); // still pinned
  });

  it('while the service fails: only on the quarter hours', () => {
    const failing = { ...fresh, failingSince: at('2026-11-27T17:00:00Z') };
    expect(ptaxDue(at('2026-11-27T17:07:00Z'), 14, failing, ptax)).toBe(false);
    expect(ptaxDue(at('2026-11-27T17:15:00Z'), 14, failing, ptax)).toBe(true);
    expect(ptaxDue(at('2026-11-27T17:15:00Z'), 14, failing, null)).toBe(true);
    expect(ptaxDue(at('2026-11-27T17:16:00Z'), 14, failing, null)).toBe(false);
  });
});

describe('brlPrices', () => {
  it('each USD price at the rate and markup; absent cache prices stay absent', () => {
    const usd = {
      model_id: 'm',
      deployment: 'primary',
      input_usd: 3_000_000n,
      output_usd: 15_000_000n,
      cached_input_usd: 300_000n,
      cache_write_usd: 3_750_000n,
      cache_write_1h_usd: null,
      markup_ppm: 1_300_000n,
    };
    expect(brlPrices(usd, 5_432_100n)).toEqual({
      input_price: 21_185_190n,
      output_price: 105_925_950n,
      cached_input_price: 2_118_519n,
      cache_write_price: 26_481_488n, // 3,75 × 5,4321 × 1,3 = 26,4814875 → up to 26,481488
      cache_write_1h_price: null,
    });
  });
});
