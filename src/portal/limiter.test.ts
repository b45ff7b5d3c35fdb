import { describe, expect, it } from 'vitest';
import { TokenBuckets } from './limiter.ts';
import { throttleKey } from '../auth/client-address.ts';

describe('TokenBuckets', () => {
  it('a burst, then tokens back at the rate; retry-after in whole seconds', () => {
    let t = 0;
    const b = new TokenBuckets({ burst: 3, perSecond: 0.5, now: () => t });
    expect([b.take('a'), b.take('a'), b.take('a'), b.take('a')]).toEqual([true, true, true, false]);
    expect(b.retryAfterS('a')).toBe(2);
    expect(b.take('b')).toBe(true); // another address has its own bucket
    t = 1999;
    expect(b.has('a')).toBe(false);
    t = 2000;
    expect(b.take('a')).toBe(true);
    expect(b.take('a')).toBe(false);
    t = 1_000_000;
    expect([b.take('a'), b.take('a'), b.take('a'), b.take('a')]).toEqual([true, true, true, false]);
  });

  it('remembers at most maxKeys addresses (bounded memory under a flood from many addresses)', () => {
    const b = new TokenBuckets({ burst: 1, perSecond: 0.001, maxKeys: 100, now: () => 0 });
    for (let i = 0; i < 10_000; i++) b.take(`10.0.${i >> 8}.${i & 255}`);
    expect(b.size).toBe(100);
  });
});

describe('throttleKey', () => {
  it('IPv4 as it is, IPv6 by its /64', () => {
    expect(throttleKey('198.51.100.7')).toBe('198.51.100.7');
    expect(throttleKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe('2001:db8:1:2::/64');
    expect(throttleKey('2001:db8:1:2::1')).toBe(throttleKey('2001:db8:1:2:ffff::9'));
    expect(throttleKey('unknown')).toBe('unknown');
  });
});
