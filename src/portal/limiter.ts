import { LRUCache } from 'lru-cache';

// Token buckets per client address, in memory and bounded: at most `maxKeys` addresses are
// remembered (the least recently seen is forgotten first), so a flood from many addresses costs a
// fixed amount of memory. A forgotten address starts again with a full bucket; that is the price
// of the bound, and why these limits guard what is cheap to answer (nothing here touches the
// database before the bucket says yes).

export interface BucketOptions {
  /** Tokens a new address starts with: the burst. */
  burst: number;
  /** Tokens added back per second, up to `burst`. */
  perSecond: number;
  maxKeys?: number;
  now?: () => number;
}

interface Bucket {
  tokens: number;
  at: number;
}

export class TokenBuckets {
  private readonly buckets: LRUCache<string, Bucket>;
  private readonly now: () => number;

  constructor(private readonly o: BucketOptions) {
    this.buckets = new LRUCache({ max: o.maxKeys ?? 10_000 });
    this.now = o.now ?? Date.now;
  }

  private refill(key: string): Bucket {
    const t = this.now();
    const b = this.buckets.get(key) ?? { tokens: this.o.burst, at: t };
    b.tokens = Math.min(this.o.burst, b.tokens + ((t - b.at) / 1000) * this.o.perSecond);
    b.at = t;
    this.buckets.set(key, b);
    return b;
  }

  /** Whether the address has a token left (without taking one). */
  has(key: string): boolean {
    return this.refill(key).tokens >= 1;
  }

  /** Takes a token; false when there is none (nothing taken). */
  take(key: string): boolean {
    const b = this.refill(key);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Seconds until the address has a token again (0 when it has one). */
  retryAfterS(key: string): number {
    const b = this.refill(key);
    return b.tokens >= 1 ? 0 : Math.ceil((1 - b.tokens) / this.o.perSecond);
  }

  get size(): number {
    return this.buckets.size;
  }
}
