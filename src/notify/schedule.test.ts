import { describe, expect, it } from 'vitest';
import { DEFAULT_SCHEDULE_MS, nextAttempt } from './deliveries.ts';
import { parseSchedule } from '../config.ts';

describe('NOTIFY_RETRY_SCHEDULE', () => {
  it('parses delays with units; refuses anything else', () => {
    expect(parseSchedule('5s,30s,2m,10m,1h,3h,6h,12h')).toEqual(DEFAULT_SCHEDULE_MS);
    expect(parseSchedule(' 200ms , 1d ')).toEqual([200, 86_400_000]);
    expect(parseSchedule('')).toBe(null);
    expect(parseSchedule('5')).toBe(null);
    expect(parseSchedule('5s,,1m')).toBe(null);
    expect(parseSchedule('-5s')).toBe(null);
    expect(parseSchedule('1.5s')).toBe(null);
  });
  it('the default spans about a day: 22 h 12 min 35 s after the first attempt', () => {
    expect(DEFAULT_SCHEDULE_MS.reduce((a, b) => a + b, 0)).toBe(((22 * 60 + 12) * 60 + 35) * 1000);
  });
  it('next attempt: the schedule, then none; Retry-After lengthens a delay (at most 12 h); jitter stays within ±10%', () => {
    const now = 1_000_000;
    expect(nextAttempt(1, DEFAULT_SCHEDULE_MS, { jitter: false, now })?.getTime()).toBe(now + 5000);
    expect(nextAttempt(8, DEFAULT_SCHEDULE_MS, { jitter: false, now })?.getTime()).toBe(now + 43_200_000);
    expect(nextAttempt(9, DEFAULT_SCHEDULE_MS, { jitter: false, now })).toBe(null);
    expect(nextAttempt(1, DEFAULT_SCHEDULE_MS, { jitter: false, now, retryAfterMs: 60_000 })?.getTime()).toBe(now + 60_000);
    expect(nextAttempt(1, DEFAULT_SCHEDULE_MS, { jitter: false, now, retryAfterMs: 1000 })?.getTime()).toBe(now + 5000);
    expect(nextAttempt(1, DEFAULT_SCHEDULE_MS, { jitter: false, now, retryAfterMs: 10 ** 12 })?.getTime()).toBe(now + 12 * 3_600_000);
    for (let i = 0; i < 200; i++) {
      const d = nextAttempt(2, DEFAULT_SCHEDULE_MS, { now })!.getTime() - now;
      expect(d).toBeGreaterThanOrEqual(27_000);
      expect(d).toBeLessThanOrEqual(33_000);
    }
  });
});
