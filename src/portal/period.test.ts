import { describe, expect, it } from 'vitest';
import { addDays, daysOf, lastDays, MAX_PERIOD_DAYS, parsePeriod, periodDays, todayInSaoPaulo } from './period.ts';

const q = (s: string) => new URLSearchParams(s);
// 2025-03-02 01:30 UTC is still 2025-03-01 (22:30) in São Paulo
const NOW = new Date('2025-03-02T01:30:00Z');

describe('São Paulo days', () => {
  it('today is the São Paulo date, not the UTC one', () => {
    expect(todayInSaoPaulo(NOW)).toBe('2025-03-01');
    expect(todayInSaoPaulo(new Date('2025-03-02T03:00:00Z'))).toBe('2025-03-02');
  });
  it('day arithmetic across months, leap days and years', () => {
    expect(addDays('2024-02-28', 1)).toBe('2024-02-29');
    expect(addDays('2025-02-28', 1)).toBe('2025-03-01');
    expect(addDays('2025-01-01', -1)).toBe('2024-12-31');
    expect(periodDays({ from: '2024-01-01', to: '2024-12-31' })).toBe(366);
    expect(daysOf({ from: '2025-02-27', to: '2025-03-02' })).toEqual(['2025-02-27', '2025-02-28', '2025-03-01', '2025-03-02']);
    expect(lastDays(7, NOW)).toEqual({ from: '2025-02-23', to: '2025-03-01' });
  });
});

describe('parsePeriod', () => {
  it('presets, dates, defaults', () => {
    expect(parsePeriod(q(''), NOW)).toEqual({ ok: true, period: { from: '2025-01-31', to: '2025-03-01' }, preset: 30 });
    expect(parsePeriod(q('days=7'), NOW)).toEqual({ ok: true, period: { from: '2025-02-23', to: '2025-03-01' }, preset: 7 });
    expect(parsePeriod(q('days=90'), NOW)).toEqual({ ok: true, period: { from: '2024-12-02', to: '2025-03-01' }, preset: 90 });
    expect(parsePeriod(q('from=2025-01-01&to=2025-01-31'), NOW)).toEqual({ ok: true, period: { from: '2025-01-01', to: '2025-01-31' }, preset: null });
    expect(parsePeriod(q('from=2025-02-20'), NOW)).toEqual({ ok: true, period: { from: '2025-02-20', to: '2025-03-01' }, preset: null });
    expect(parsePeriod(q('to=2025-01-31'), NOW)).toEqual({ ok: true, period: { from: '2025-01-02', to: '2025-01-31' }, preset: null });
    // dates win over a preset
    expect(parsePeriod(q('days=7&from=2025-01-01&to=2025-01-02'), NOW)).toEqual({ ok: true, period: { from: '2025-01-01', to: '2025-01-02' }, preset: null });
  });
  it('refusals, each with its message', () => {
    for (const [s, error] of [
      ['days=8', 'period.bad_preset'],
      ['days=', 'period.bad_preset'],
      ['days=7.0x', 'period.bad_preset'],
      ['from=2025-02-29&to=2025-03-01', 'period.bad_date'],
      ['from=2025-13-01', 'period.bad_date'],
      ['from=2025-1-1', 'period.bad_date'],
      ['to=20250101', 'period.bad_date'],
      ['from=2025-01-01T00:00&to=2025-01-02', 'period.bad_date'],
      ['from=2025-03-02&to=2025-03-01', 'period.reversed'],
      ['from=2024-01-01&to=2025-02-04', 'period.too_long'],
    ] as const)
      expect(parsePeriod(q(s), NOW), s).toEqual({ ok: false, error });
    expect(periodDays({ from: '2024-01-01', to: '2025-02-03' })).toBe(MAX_PERIOD_DAYS);
    expect(parsePeriod(q('from=2024-01-01&to=2025-02-03'), NOW).ok).toBe(true);
  });
});
