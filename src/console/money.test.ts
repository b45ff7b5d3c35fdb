import { describe, expect, it } from 'vitest';
import { type MarginRow, dayTotals, defaultRange, parseRange, totals } from './money.ts';

const row = (day: string, revenue: bigint, cost: bigint, uncosted = 0, batch = { requests: 0, revenue: 0n, cost: 0n }): MarginRow => ({
  day,
  model: 'm/x',
  tenant_id: 't',
  tenant_name: 'T',
  requests: 1,
  input_tokens: 0n,
  cached_tokens: 0n,
  cache_write_tokens: 0n,
  output_tokens: 0n,
  reasoning_tokens: 0n,
  revenue_micros: revenue,
  vendor_cost_micros: cost,
  uncosted,
  batch_requests: batch.requests,
  batch_revenue_micros: batch.revenue,
  batch_vendor_cost_micros: batch.cost,
});

describe('margin helpers', () => {
  it('today and 29 days before, São Paulo (UTC−3): 02:30 UTC is still the day before', () => {
    expect(defaultRange(new Date('2026-03-10T02:30:00Z'))).toEqual({ from: '2026-02-08', to: '2026-03-09' });
    expect(defaultRange(new Date('2026-03-10T03:00:00Z'))).toEqual({ from: '2026-02-09', to: '2026-03-10' });
  });
  it('a range: real days, from ≤ to, at most 366 days', () => {
    expect(parseRange('2026-01-01', '2026-01-31')).toEqual({ from: '2026-01-01', to: '2026-01-31' });
    expect(parseRange('2025-01-01', '2026-01-01')).toEqual({ from: '2025-01-01', to: '2026-01-01' });
    for (const [f, t] of [
      ['2026-02-30', '2026-03-01'],
      ['2026-01-31', '2026-01-01'],
      ['2024-01-01', '2025-01-02'],
      ['2026-1-1', '2026-01-02'],
      ["2026-01-01'", '2026-01-02'],
    ])
      expect(parseRange(f, t), `${f}..${t}`).toBeNull();
  });
  it('every day of the range in the chart, sums per day, totals', () => {
    const rows = [row('2026-01-02', 10n, 4n), row('2026-01-02', 5n, 0n, 1), row('2026-01-03', 7n, 9n, 0, { requests: 1, revenue: 3n, cost: 2n })];
    expect(dayTotals(rows, '2026-01-01', '2026-01-03')).toEqual([
      { day: '2026-01-01', revenue_micros: 0n, vendor_cost_micros: 0n },
      { day: '2026-01-02', revenue_micros: 15n, vendor_cost_micros: 4n },
      { day: '2026-01-03', revenue_micros: 7n, vendor_cost_micros: 9n },
    ]);
    expect(totals(rows)).toEqual({
      requests: 3,
      revenue_micros: 22n,
      vendor_cost_micros: 13n,
      uncosted: 1,
      batch_requests: 1,
      batch_revenue_micros: 3n,
      batch_vendor_cost_micros: 2n,
    });
  });
});
