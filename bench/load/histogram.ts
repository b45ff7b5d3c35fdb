// A latency histogram with bounded memory and known precision, for millions of samples (every
// inter-token gap of a run) without storing them.
//
// Values are milliseconds, recorded as whole microseconds (rounded). Below 2048 µs every
// microsecond has its own bucket (exact to 1 µs). From 2048 µs up, each power of two is split
// into 1024 equal sub-buckets: relative error ≤ 1/1024 (< 0.1 %). A bucket's value is its
// midpoint. min, max, count and sum are exact.
//
// Percentiles use the nearest-rank definition: p(q) is the value of the ⌈q·n⌉-th smallest
// sample (the smallest for q = 0), clamped to [min, max].

const EXACT = 2048; // µs with exact buckets
const SUB = 1024; // sub-buckets per power of two above that
const MAX_EXP = 30; // 2^41 µs ≈ 25 days; larger values land in the last bucket

export function bucketIndex(us: number): number {
  if (us < EXACT) return us < 0 ? 0 : us;
  const e = Math.min(MAX_EXP, Math.floor(Math.log2(us)) - 10);
  let m = Math.floor(us / 2 ** e);
  // log2 of values just below a power of two can round up; keep m in [1024, 2047]
  if (m < SUB) m = SUB;
  if (m >= 2 * SUB) m = 2 * SUB - 1;
  return EXACT + (e - 1) * SUB + (m - SUB);
}

/** Midpoint of the bucket, in µs. */
export function bucketValue(i: number): number {
  if (i < EXACT) return i;
  const e = Math.floor((i - EXACT) / SUB) + 1;
  const m = SUB + ((i - EXACT) % SUB);
  return m * 2 ** e + 2 ** (e - 1);
}

const SIZE = EXACT + MAX_EXP * SUB;

export interface HistogramSummary {
  count: number;
  min: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export class LatencyHistogram {
  readonly counts = new Uint32Array(SIZE);
  count = 0;
  sum = 0;
  min = Infinity;
  max = -Infinity;

  record(ms: number): void {
    const us = Math.round(ms * 1000);
    this.counts[bucketIndex(us)]!++;
    this.count++;
    this.sum += ms;
    if (ms < this.min) this.min = ms;
    if (ms > this.max) this.max = ms;
  }

  merge(other: LatencyHistogram): void {
    for (let i = 0; i < SIZE; i++) if (other.counts[i]) this.counts[i]! += other.counts[i]!;
    this.count += other.count;
    this.sum += other.sum;
    if (other.min < this.min) this.min = other.min;
    if (other.max > this.max) this.max = other.max;
  }

  /** Nearest-rank percentile in ms; 0 when empty. q in [0, 1]. */
  percentile(q: number): number {
    if (this.count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.count));
    let cum = 0;
    for (let i = 0; i < SIZE; i++) {
      cum += this.counts[i]!;
      if (cum >= rank) return Math.min(this.max, Math.max(this.min, bucketValue(i) / 1000));
    }
    return this.max;
  }

  summary(): HistogramSummary {
    if (this.count === 0) return { count: 0, min: 0, mean: 0, p50: 0, p90: 0, p99: 0, max: 0 };
    const r = (v: number) => Math.round(v * 1000) / 1000;
    return {
      count: this.count,
      min: r(this.min),
      mean: r(this.sum / this.count),
      p50: r(this.percentile(0.5)),
      p90: r(this.percentile(0.9)),
      p99: r(this.percentile(0.99)),
      max: r(this.max),
    };
  }
}

/** Exact nearest-rank percentile of an ascending-sorted array (for small sets and tests). */
export function percentileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[rank - 1]!;
}
