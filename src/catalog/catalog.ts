import { createHash } from 'node:crypto';
import type { NatsConnection, Subscription } from 'nats';
import { getModel, listModels, type ModelRecord } from '../db/models.ts';
import type { DbClient } from '../db/pool.ts';
import { subjects } from '../bus/subjects.ts';
import { createLogger } from '../log.ts';

const log = createLogger('catalog');
const MISS_TTL_MS = 1000;

/**
 * A short hash of everything in a catalog entry that decides where a request goes and what it
 * costs. The front door puts it on the job; a worker serves the job only from an entry of its
 * own catalog with the same fingerprint, so a forged or stale job cannot point a worker at
 * another upstream, key variable or price.
 */
export function fingerprint(m: ModelRecord): string {
  const canonical = JSON.stringify([
    m.id,
    m.pool,
    m.protocol,
    m.upstream_model,
    m.base_url,
    m.api_key_env,
    String(m.input_price),
    String(m.output_price),
    m.context_length,
    m.max_output_tokens,
    m.input_modalities,
    m.image_input_tokens,
    m.extra_params,
  ]);
  return createHash('sha256').update(canonical).digest('base64url').slice(0, 16);
}

export interface CatalogEntry extends ModelRecord {
  fingerprint: string;
}

const withFingerprint = (m: ModelRecord): CatalogEntry => Object.assign(m, { fingerprint: fingerprint(m) });

/** Tells every front door and worker that the catalog changed (`catraca model set`). */
export function announceCatalogChange(nc: NatsConnection, modelId: string): void {
  nc.publish(subjects.catalogChanged, new TextEncoder().encode(JSON.stringify({ model: modelId })));
}

/**
 * The model catalog, held in memory: reloaded every `refreshMs`, at once when a change is
 * announced on NATS, and one model at a time on a miss.
 */
export class Catalog {
  private models = new Map<string, CatalogEntry>();
  private misses = new Map<string, number>();
  private loading?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private sub?: Subscription;

  constructor(
    private db: DbClient,
    private refreshMs = 5000,
  ) {}

  async start(nc?: NatsConnection): Promise<void> {
    await this.reload();
    this.timer = setInterval(() => this.reload().catch((err) => log.warn('catalog reload failed', { err })), this.refreshMs);
    this.timer.unref();
    if (nc) {
      this.sub = nc.subscribe(subjects.catalogChanged, {
        callback: () => void this.reload().catch((err) => log.warn('catalog reload failed', { err })),
      });
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.sub?.unsubscribe();
  }

  reload(): Promise<void> {
    if (!this.loading) {
      this.loading = listModels(this.db)
        .then((rows) => {
          this.models = new Map(rows.map((m) => [m.id, withFingerprint(m)]));
          this.misses.clear();
        })
        .finally(() => (this.loading = undefined));
    }
    return this.loading;
  }

  /** A miss looks the one model up (a model just added with `catraca model set` works at once). */
  async get(id: string): Promise<CatalogEntry | undefined> {
    const hit = this.models.get(id);
    if (hit) return hit;
    const missedAt = this.misses.get(id);
    if (missedAt !== undefined && Date.now() - missedAt < MISS_TTL_MS) return undefined;
    return this.fetch(id);
  }

  /** Reads one model from the database now (a worker whose entry disagrees with a job's). */
  async fetch(id: string): Promise<CatalogEntry | undefined> {
    const found = await getModel(this.db, id);
    if (found) {
      const entry = withFingerprint(found);
      this.models.set(id, entry);
      this.misses.delete(id);
      return entry;
    }
    this.models.delete(id);
    if (this.misses.size > 10000) this.misses.clear();
    this.misses.set(id, Date.now());
    return undefined;
  }

  all(): CatalogEntry[] {
    return [...this.models.values()];
  }
}

/** The part of the catalog a worker needs; tests give a fixed list. */
export interface ModelSource {
  get(id: string): Promise<CatalogEntry | undefined>;
  fetch(id: string): Promise<CatalogEntry | undefined>;
}

export function staticCatalog(models: ModelRecord[]): ModelSource {
  const byId = new Map(models.map((m) => [m.id, withFingerprint({ ...m })]));
  return { get: async (id) => byId.get(id), fetch: async (id) => byId.get(id) };
}
