import { describe, expect, it } from 'vitest';
import { todayInSaoPaulo } from '../../billing/tenant-days.ts';
import { addPeriod, dueDateFor, projectCharge, timeToSchedule } from './projection.ts';

const brl = (s: string) => BigInt(Math.round(Number(s) * 100)) * 10_000n;

describe('recurring top-up amount', () => {
  const base = { targetMicros: brl('100.00'), maxMicros: brl('200.00') };

  it('brings the projected balance up to the target, to the centavo (the worked example of docs/billing.md)', () => {
    // R$ 40,00 now, R$ 70,00 spent in 7 days (R$ 10,00 a day), due in 3 days: 40 − 30 = 10 → 90,00
    const p = projectCharge({ ...base, balanceMicros: brl('40.00'), spentWindowMicros: brl('70.00'), daysUntilDue: 3 });
    expect(p).toEqual({ expectedSpendMicros: 30_000_000n, projectedMicros: 10_000_000n, amountMicros: 90_000_000n, rule: 'projection' });
  });

  it('rounds the expected spend up to the micro-real and the amount up to the centavo', () => {
    // 10,000001 × 3 / 7 = 4,285714714… → 4,285715; 100 − (12,34 − 4,285715) = 91,945715 → 91,95
    const p = projectCharge({ ...base, balanceMicros: brl('12.34'), spentWindowMicros: 10_000_001n, daysUntilDue: 3 });
    expect(p.expectedSpendMicros).toBe(4_285_715n);
    expect(p.projectedMicros).toBe(8_054_285n);
    expect(p.amountMicros).toBe(91_950_000n);
  });

  it('is capped at the payer maximum', () => {
    const p = projectCharge({ ...base, balanceMicros: 0n, spentWindowMicros: brl('1400.00'), daysUntilDue: 3 });
    expect(p.projectedMicros).toBe(-600_000_000n);
    expect(p).toMatchObject({ amountMicros: brl('200.00'), rule: 'capped' });
  });

  it('is never below R$ 1,00', () => {
    const p = projectCharge({ ...base, balanceMicros: brl('99.50'), spentWindowMicros: 0n, daysUntilDue: 5 });
    expect(p).toMatchObject({ amountMicros: 1_000_000n, rule: 'floor' });
  });

  it('is none when the balance is expected to stay at or above the target', () => {
    expect(projectCharge({ ...base, balanceMicros: brl('150.00'), spentWindowMicros: brl('70.00'), daysUntilDue: 3 })).toEqual({
      expectedSpendMicros: 30_000_000n,
      projectedMicros: 120_000_000n,
      amountMicros: null,
      rule: 'above_target',
    });
    expect(projectCharge({ ...base, balanceMicros: brl('130.00'), spentWindowMicros: brl('70.00'), daysUntilDue: 3 }).amountMicros).toBeNull();
    expect(projectCharge({ ...base, balanceMicros: brl('129.99'), spentWindowMicros: brl('70.00'), daysUntilDue: 3 }).amountMicros).toBe(1_000_000n);
  });

  it('refuses a maximum below R$ 1,00 and a negative horizon', () => {
    expect(() => projectCharge({ ...base, maxMicros: 990_000n, balanceMicros: 0n, spentWindowMicros: 0n, daysUntilDue: 3 })).toThrow(RangeError);
    expect(() => projectCharge({ ...base, balanceMicros: 0n, spentWindowMicros: 0n, daysUntilDue: -1 })).toThrow(RangeError);
  });
});

describe('recurring top-up calendar', () => {
  it('takes São Paulo dates', () => {
    expect(todayInSaoPaulo(new Date('2026-11-28T02:30:00Z'))).toBe('2026-11-27');
    expect(todayInSaoPaulo(new Date('2026-11-28T03:30:00Z'))).toBe('2026-11-28');
  });
  it('adds periods (a month keeps its day, clamped to the month end)', () => {
    expect(addPeriod('2026-11-27', 'SEMANAL')).toBe('2026-12-04');
    expect(addPeriod('2026-12-15', 'MENSAL')).toBe('2027-01-15');
    expect(addPeriod('2027-01-31', 'MENSAL')).toBe('2027-02-28');
  });
  it('sends a charge 2–10 days before its due date', () => {
    expect(timeToSchedule('2026-11-27', '2026-12-01')).toBe(false);
    expect(timeToSchedule('2026-11-28', '2026-12-01')).toBe(true);
    expect(dueDateFor('2026-11-28', '2026-12-01')).toBe('2026-12-01');
    expect(dueDateFor('2026-11-30', '2026-12-01')).toBe('2026-12-03'); // late: today + 3
    expect(() => dueDateFor('2026-11-01', '2026-12-01')).toThrow(RangeError);
  });
});
