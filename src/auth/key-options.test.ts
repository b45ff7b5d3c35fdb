import { describe, expect, test } from 'vitest';
import { formatRateLimit, parseExpiry, parseRateLimit } from './key-options.ts';

describe('parseRateLimit / formatRateLimit', () => {
  test.each([
    ['60/60s', 60, 60, '60/1m'],
    ['100/1m', 100, 60, '100/1m'],
    ['10/s', 10, 1, '10/1s'],
    ['1000/1h', 1000, 3600, '1000/1h'],
    ['5000/1d', 5000, 86400, '5000/1d'],
    ['7/90s', 7, 90, '7/90s'],
  ])('%s → %i per %i s → %s', (text, requests, intervalS, formatted) => {
    expect(parseRateLimit(text)).toEqual({ requests, intervalS });
    expect(formatRateLimit(requests, intervalS)).toBe(formatted);
  });
  test.each(['', 'lots', '0/1m', '10/0s', '10/1y', '-1/1m', '1.5/1m'])('%j is refused', (text) => expect(parseRateLimit(text)).toBeNull());
});

describe('parseExpiry', () => {
  const now = new Date('2026-03-10T12:00:00Z');
  test.each([
    ['90m', '2026-03-10T13:30:00.000Z'],
    ['12h', '2026-03-11T00:00:00.000Z'],
    ['30d', '2026-04-09T12:00:00.000Z'],
    ['2w', '2026-03-24T12:00:00.000Z'],
    ['2026-12-31', '2026-12-31T00:00:00.000Z'],
    ['2026-12-31T23:59:59Z', '2026-12-31T23:59:59.000Z'],
    ['2026-12-31T20:00-03:00', '2026-12-31T23:00:00.000Z'],
  ])('%s → %s', (text, iso) => {
    const r = parseExpiry(text, now);
    expect(r.ok && r.at.toISOString()).toBe(iso);
  });
  test.each([
    ['2026-03-10', 'is not in the future'],
    ['0d', 'is not in the future'],
    ['2026-02-30', 'is not a calendar date'],
    ['2026-12-31T20:00', 'a time needs its zone'],
    ['31/12/2026', 'is neither a duration'],
    ['3660d', 'more than 10 years away'],
  ])('%s is refused: %s', (text, message) => {
    const r = parseExpiry(text, now);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.message).toContain(message);
  });
});
