import { listModels, type ModelRecord } from '../db/models.ts';
import type { Db } from '../db/pool.ts';
import { createLogger } from '../log.ts';

const log = createLogger('catalog');

/** The model catalog, held in memory and reloaded every `refreshMs` (and at once on a miss). */
export class Catalog {
  private models = new Map<string, ModelRecord>();
  private lastLoad = 0;
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
          this.lastLoad = Date.now();
        })
        .finally(() => (this.loading = undefined));
    }
    return this.loading;
  }

  async get(id: string): Promise<ModelRecord | undefined> {
    const hit = this.models.get(id);
    if (hit) return hit;
    if (Date.now() - this.lastLoad > 1000) await this.reload();
    return this.models.get(id);
  }

  all(): ModelRecord[] {
    return [...this.models.values()];
  }
}
