import { getModel, listModels, type ModelRecord } from '../db/models.ts';
import type { Db } from '../db/pool.ts';
import { createLogger } from '../log.ts';

const log = createLogger('catalog');
const MISS_TTL_MS = 1000;

/** The model catalog, held in memory and reloaded every `refreshMs` (and at once on a miss). */
export class Catalog {
  private models = new Map<string, ModelRecord>();
  private misses = new Map<string, number>();
  private loading?: Promise<void>;
  private timer?: NodeJS.Timeout;

  constructor(private db: Db, private refreshMs = 5000) {}

  async start(): Promise<void> {
    await this.reload();
    this.timer = setInterval(() => this.reload().catch((err) => log.warn('catalog reload failed', { err })), this.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private reload(): Promise<void> {
    if (!this.loading) {
      this.loading = listModels(this.db)
        .then((rows) => {
          this.models = new Map(rows.map((m) => [m.id, m]));
          this.misses.clear();
        })
        .finally(() => (this.loading = undefined));
    }
    return this.loading;
  }

  /** A miss looks the one model up (a model just added with `catraca model set` works at once). */
  async get(id: string): Promise<ModelRecord | undefined> {
    const hit = this.models.get(id);
    if (hit) return hit;
    const missedAt = this.misses.get(id);
    if (missedAt !== undefined && Date.now() - missedAt < MISS_TTL_MS) return undefined;
    const found = await getModel(this.db, id);
    if (found) this.models.set(id, found);
    else {
      if (this.misses.size > 10000) this.misses.clear();
      this.misses.set(id, Date.now());
    }
    return found ?? undefined;
  }

  all(): ModelRecord[] {
    return [...this.models.values()];
  }
}
