export interface LatencySummary {
  count: number;
  avg: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

const RING = 1024;

/** Latencies of the last 1024 events (percentiles) and of all of them (count, average, max). */
export class LatencyRing {
  private readonly ring = new Float64Array(RING);
  private n = 0;
  private sum = 0;
  private max = 0;

  record(ms: number): void {
    this.ring[this.n++ % RING] = ms;
    this.sum += ms;
    if (ms > this.max) this.max = ms;
  }

  summary(): LatencySummary {
    const n = Math.min(this.n, RING);
    const sorted = Array.from(this.ring.subarray(0, n)).sort((a, b) => a - b);
    const q = (p: number) => (n === 0 ? 0 : sorted[Math.min(n - 1, Math.floor(p * n))]);
    return { count: this.n, avg: this.n ? this.sum / this.n : 0, p50: q(0.5), p95: q(0.95), p99: q(0.99), max: this.max };
  }
}
