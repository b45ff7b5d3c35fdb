/**
 * Groups items into batches for `run`: at most `concurrency` batches run at once, what arrives
 * meanwhile waits and goes together, and a batch smaller than `batchSize` starts only after
 * `lingerMs` (a lone item waits a few ms for company rather than cost a transaction of its own).
 */
export class LingerBatcher<T> {
  private readonly buffer: T[] = [];
  private readonly running = new Set<Promise<void>>();
  private flushing = 0;
  private lingering: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly run: (batch: T[]) => Promise<void>,
    private readonly o: { batchSize: number; concurrency: number; lingerMs: number },
  ) {}

  /** items waiting or being run */
  get size(): number {
    return this.buffer.length + this.flushing;
  }

  get waiting(): number {
    return this.buffer.length;
  }

  push(item: T): void {
    this.buffer.push(item);
    if (this.buffer.length < this.o.batchSize && this.o.lingerMs > 0 && !this.closed) {
      this.lingering ??= setTimeout(() => {
        this.lingering = undefined;
        this.start();
      }, this.o.lingerMs);
      return;
    }
    this.start();
  }

  /** Resolves when one running batch ends (back-pressure for the producer). */
  oneDone(): Promise<void> {
    return Promise.race(this.running);
  }

  /** Runs what waits now, without lingering, and resolves when every batch has ended. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.lingering) {
      clearTimeout(this.lingering);
      this.lingering = undefined;
    }
    this.start();
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  private start(): void {
    if (this.lingering && this.buffer.length >= this.o.batchSize) {
      clearTimeout(this.lingering);
      this.lingering = undefined;
    }
    while (this.flushing < this.o.concurrency && this.buffer.length > 0) {
      const batch = this.buffer.splice(0, this.o.batchSize);
      this.flushing++;
      const p: Promise<void> = this.run(batch).finally(() => {
        this.flushing--;
        this.running.delete(p);
        if (this.buffer.length > 0) this.start();
      });
      this.running.add(p);
    }
  }
}
