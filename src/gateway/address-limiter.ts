// A token bucket per client address, in memory and bounded: `perMinute` tokens at most (the burst),
// refilled at `perMinute` a minute. At most `maxAddresses` buckets are kept; a full bucket carries
// no information and is dropped by a sweep, and when every slot holds a partly used bucket, new
// addresses share one overflow bucket (a flood from many addresses can neither grow the map nor
// reset the buckets of addresses already being limited).

interface Bucket {
  tokens: number;
  at: number;
}

const OVERFLOW = '\u0000overflow';
const SWEEP_EVERY_MS = 1000;

export class AddressLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private lastSweep = 0;

  constructor(
    private readonly perMinute: number,
    private readonly maxAddresses = 100_000,
  ) {
    this.perMs = perMinute / 60_000;
  }

  get size(): number {
    return this.buckets.size;
  }

  /** Takes a token for `address`: 0 when there was one, else the seconds until there is. */
  take(address: string, now = Date.now()): number {
    const b = this.bucket(address, now);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.perMs / 1000));
  }

  /** Gives back the token `take` took (the key was found: not a failed authentication). */
  refund(address: string): void {
    const b = this.buckets.get(address) ?? this.buckets.get(OVERFLOW);
    if (b) b.tokens = Math.min(this.perMinute, b.tokens + 1);
  }

  private bucket(address: string, now: number): Bucket {
    let key = address;
    let b = this.buckets.get(key);
    if (!b && this.buckets.size >= this.maxAddresses) {
      this.sweep(now);
      if (this.buckets.size >= this.maxAddresses) {
        key = OVERFLOW;
        b = this.buckets.get(key);
      }
    }
    if (!b) {
      b = { tokens: this.perMinute, at: now };
      this.buckets.set(key, b);
      return b;
    }
    b.tokens = Math.min(this.perMinute, b.tokens + (now - b.at) * this.perMs);
    b.at = now;
    return b;
  }

  /** Drops the buckets that have refilled (at most once a second: a sweep walks the whole map). */
  private sweep(now: number): void {
    if (now - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = now;
    for (const [key, b] of this.buckets) if (b.tokens + (now - b.at) * this.perMs >= this.perMinute) this.buckets.delete(key);
  }
}
