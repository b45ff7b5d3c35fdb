import { describe, expect, it } from 'vitest';
import { bucketIndex, bucketValue, LatencyHistogram, percentileSorted } from './histogram.ts';

describe('percentileSorted (nearest rank)', () => {
  const v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  it('takes the ⌈q·n⌉-th smallest value', () => {
    expect(percentileSorted(v, 0.5)).toBe(5);
    expect(percentileSorted(v, 0.9)).toBe(9);
    expect(percentileSorted(v, 0.91)).toBe(10);
    expect(percentileSorted(v, 0.99)).toBe(10);
    expect(percentileSorted(v, 0)).toBe(1);
    expect(percentileSorted(v, 1)).toBe(10);
    expect(percentileSorted([], 0.5)).toBe(0);
  });
});

describe('bucket layout', () => {
  it('is exact per µs below 2048 µs', () => {
    expect(bucketIndex(0)).toBe(0);
    expect(bucketIndex(1234)).toBe(1234);
    expect(bucketValue(1234)).toBe(1234);
    expect(bucketIndex(2047)).toBe(2047);
  });
  it('splits each power of two into 1024 sub-buckets above', () => {
    expect(bucketIndex(2048)).toBe(2048); // [2048, 2050) midpoint 2049
    expect(bucketValue(2048)).toBe(2049);
    expect(bucketIndex(2049)).toBe(2048);
    expect(bucketIndex(2050)).toBe(2049);
    expect(bucketIndex(4095)).toBe(3071);
    expect(bucketIndex(4096)).toBe(3072); // [4096, 4100) midpoint 4098
    expect(bucketValue(3072)).toBe(4098);
    // 1 000 000 µs: 2^19 ≤ v < 2^20 → width 2^9 = 512, m = ⌊v / 512⌋ = 1953 → [999 936, 1 000 448)
    expect(bucketIndex(1_000_000)).toBe(2048 + 8 * 1024 + (1953 - 1024));
    expect(bucketValue(bucketIndex(1_000_000))).toBe(1_000_192);
  });
  it('keeps every value within 0.1 % of its bucket value', () => {
    for (const us of [2048, 3000, 4095, 4096, 65_535, 65_536, 123_456, 9_999_999, 60_000_000]) {
      const rel = Math.abs(bucketValue(bucketIndex(us)) - us) / us;
      expect(rel).toBeLessThan(0.001);
    }
  });
});

describe('LatencyHistogram', () => {
  it('gives exact nearest-rank percentiles for values below 2.048 ms', () => {
    const h = new LatencyHistogram();
    for (let i = 1; i <= 100; i++) h.record(i / 100); // 0.01 … 1.00 ms
    expect(h.summary()).toEqual({ count: 100, min: 0.01, mean: 0.505, p50: 0.5, p90: 0.9, p99: 0.99, max: 1 });
  });
  it('reports bucket midpoints above, clamped to the exact min and max', () => {
    const h = new LatencyHistogram();
    h.record(10); // 10 000 µs: width 8, bucket [10 000, 10 008), midpoint 10 004
    h.record(100); // 100 000 µs: width 64, bucket [99 968, 100 032), midpoint 100 000
    h.record(250.123);
    expect(h.percentile(0.5)).toBe(100);
    expect(h.percentile(0.34)).toBe(100); // rank ⌈1.02⌉ = 2
    expect(h.percentile(0.33)).toBe(10.004);
    expect(h.percentile(1)).toBe(250.123); // width 128, bucket [250 112, 250 240), midpoint 250.176 → clamped to max
    expect(h.summary()).toEqual({ count: 3, min: 10, mean: 120.041, p50: 100, p90: 250.123, p99: 250.123, max: 250.123 });
  });
  it('merges', () => {
    const a = new LatencyHistogram();
    const b = new LatencyHistogram();
    a.record(1);
    a.record(2);
    b.record(0.5);
    b.record(3);
    a.merge(b);
    expect(a.summary()).toEqual({ count: 4, min: 0.5, mean: 1.625, p50: 1, p90: 3, p99: 3, max: 3 });
  });
  it('summarises an empty histogram as zeros', () => {
    expect(new LatencyHistogram().summary()).toEqual({ count: 0, min: 0, mean: 0, p50: 0, p90: 0, p99: 0, max: 0 });
  });
});
