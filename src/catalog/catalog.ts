import { createHash } from 'node:crypto';
import type { NatsConnection, Subscription } from 'nats';
import { type DeploymentRecord, getAlias, getModel, listAliases, listDeployments, listModels, type ModelRecord } from '../db/models.ts';
import type { DbClient } from '../db/pool.ts';
import { subjects } from '../bus/subjects.ts';
import { holdPrices, type Prices } from '../billing/money.ts';
import { createLogger } from '../log.ts';

const log = createLogger('catalog');
const MISS_TTL_MS = 1000;

/**
 * A short hash of everything in a catalog entry that decides where a request goes and what it
 * costs. The front door puts it on the job; a worker serves the job only from an entry of its
 * own catalog with the same fingerprint, so a forged or stale job cannot point a worker at
 * another upstream, key variable or price.
 */
export function fingerprint(m: ModelRecord, deployments: DeploymentRecord[] = []): string {
  const canonical = JSON.stringify([
    m.id,
    m.pool,
    m.protocol,
    m.upstream_model,
    m.base_url,
    m.api_key_env,
    String(m.input_price),
    String(m.output_price),
    String(m.cached_input_price),
    String(m.cache_write_price),
    String(m.cache_write_1h_price),
    m.context_length,
    m.max_output_tokens,
    m.input_modalities,
    m.image_input_tokens,
    m.extra_params,
    m.kind,
    m.legacy_completions,
    m.weight,
    m.reasoning,
    m.context_length_set,
    ...batchPriceStrings(m),
    deployments.map((d) => [
      d.id,
      d.name,
      d.protocol,
      d.base_url,
      d.api_key_env,
      d.upstream_model,
      d.weight,
      String(d.input_price),
      String(d.output_price),
      String(d.cached_input_price),
      String(d.cache_write_price),
      String(d.cache_write_1h_price),
      d.region,
      d.country,
      ...batchPriceStrings(d),
    ]),
  ]);
  return createHash('sha256').update(canonical).digest('base64url').slice(0, 16);
}

type BatchPriceFields = Pick<
  ModelRecord,
  'batch_input_price' | 'batch_output_price' | 'batch_cached_input_price' | 'batch_cache_write_price' | 'batch_cache_write_1h_price'
>;

// batch prices join a fingerprint only when set: an entry without them keeps the fingerprint it had
// before they existed (a worker not yet upgraded still serves it)
const batchPriceStrings = (r: Partial<BatchPriceFields>): string[][] => {
  const p = [r.batch_input_price, r.batch_output_price, r.batch_cached_input_price, r.batch_cache_write_price, r.batch_cache_write_1h_price];
  return p.every((x) => x === null || x === undefined) ? [] : [p.map((x) => (x === null || x === undefined ? '' : String(x)))];
};

/** A model's prices in the billing rule's terms (src/billing/money.ts). */
export function pricesOf(m: Pick<ModelRecord, 'input_price' | 'output_price' | 'cached_input_price' | 'cache_write_price' | 'cache_write_1h_price'>): Prices {
  const p: Prices = { input: m.input_price, output: m.output_price };
  if (m.cached_input_price !== null) p.cachedInput = m.cached_input_price;
  if (m.cache_write_price !== null) p.cacheWrite = m.cache_write_price;
  if (m.cache_write_1h_price !== null) p.cacheWrite1h = m.cache_write_1h_price;
  return p;
}

/**
 * The prices a batch line is billed at: each batch price set (`own`, then `fallback` — a
 * deployment's, then its model's), else the online price.
 */
export function batchPricesOf(online: Prices, own: Partial<BatchPriceFields>, fallback: Partial<BatchPriceFields> = {}): Prices {
  const pick = (k: keyof BatchPriceFields) => own[k] ?? fallback[k] ?? null;
  const p: Prices = { input: pick('batch_input_price') ?? online.input, output: pick('batch_output_price') ?? online.output };
  const cachedInput = pick('batch_cached_input_price') ?? online.cachedInput;
  const cacheWrite = pick('batch_cache_write_price') ?? online.cacheWrite;
  const cacheWrite1h = pick('batch_cache_write_1h_price') ?? online.cacheWrite1h;
  if (cachedInput !== undefined) p.cachedInput = cachedInput;
  if (cacheWrite !== undefined) p.cacheWrite = cacheWrite;
  if (cacheWrite1h !== undefined) p.cacheWrite1h = cacheWrite1h;
  return p;
}

/**
 * One place a model is served from: its own row is the `primary` deployment; `catraca model
 * deployment add` adds others. Prices are the effective ones (a deployment's override, else the model's).
 */
export interface Deployment {
  id: string;
  name: string;
  protocol: ModelRecord['protocol'];
  base_url: string | null;
  api_key_env: string | null;
  upstream_model: string;
  weight: number;
  prices: Prices;
  /** what a batch line it serves is billed at (batchPricesOf) */
  batchPrices: Prices;
  /** how batch lines run on it (docs/batch.md; absent: queue) */
  batchMode?: 'vendor' | 'queue' | 'none';
  /** where it runs (null or absent: not said; the primary deployment never says) */
  region?: string | null;
  country?: string | null;
}

export interface CatalogEntry extends ModelRecord {
  fingerprint: string;
  /** the primary deployment first, then the others in the order they were added */
  deployments: Deployment[];
}

function deploymentsOf(m: ModelRecord, extra: DeploymentRecord[]): Deployment[] {
  const own = pricesOf(m);
  const primary: Deployment = {
    id: 'primary',
    name: 'primary',
    protocol: m.protocol,
    base_url: m.base_url,
    api_key_env: m.api_key_env,
    upstream_model: m.upstream_model,
    weight: m.weight ?? 1,
    prices: own,
    batchPrices: batchPricesOf(own, m),
    batchMode: m.batch_mode ?? 'queue',
    region: null,
    country: null,
  };
  return [
    primary,
    ...extra.map((d) => {
      const prices = pricesOf({
        input_price: d.input_price ?? m.input_price,
        output_price: d.output_price ?? m.output_price,
        cached_input_price: d.cached_input_price ?? m.cached_input_price,
        cache_write_price: d.cache_write_price ?? m.cache_write_price,
        cache_write_1h_price: d.cache_write_1h_price ?? m.cache_write_1h_price,
      });
      return {
        id: d.id,
        name: d.name,
        protocol: d.protocol,
        base_url: d.base_url,
        api_key_env: d.api_key_env,
        upstream_model: d.upstream_model,
        weight: d.weight,
        region: d.region ?? null,
        country: d.country ?? null,
        prices,
        batchPrices: batchPricesOf(prices, d, m),
        batchMode: d.batch_mode ?? 'queue',
      };
    }),
  ];
}

/** A model record and its other deployments as a catalog entry (`m` is extended in place). */
export const catalogEntry = (m: ModelRecord, extra: DeploymentRecord[] = []): CatalogEntry =>
  Object.assign(m, { fingerprint: fingerprint(m, extra), deployments: deploymentsOf(m, extra) });
const withFingerprint = catalogEntry;

/** The catalog entry as one of its deployments serves it (what an adapter calls). */
export function asDeployment(entry: CatalogEntry, d: Deployment): CatalogEntry {
  return d.id === 'primary' ? entry : { ...entry, protocol: d.protocol, base_url: d.base_url, api_key_env: d.api_key_env, upstream_model: d.upstream_model };
}

/** Prices to hold a request (a batch line: at batch prices) for: the dearest of every deployment's (the one that answers is not known yet). */
export function holdPricesOf(entry: Pick<CatalogEntry, 'deployments'>, batch = false): Prices {
  let input = 0n;
  let output = 0n;
  for (const d of entry.deployments) {
    const p = holdPrices(batch ? d.batchPrices : d.prices);
    if (p.input > input) input = p.input;
    if (p.output > output) output = p.output;
  }
  return { input, output };
}

/** Tells every front door and worker that the catalog changed (`catraca model set`). */
export function announceCatalogChange(nc: NatsConnection, modelId: string): void {
  nc.publish(subjects.catalogChanged, new TextEncoder().encode(JSON.stringify({ model: modelId })));
}

/**
 * The model catalog and its aliases, held in memory: reloaded every `refreshMs`, at once when a
 * change is announced on NATS, and one name at a time on a miss.
 */
export class Catalog {
  private models = new Map<string, CatalogEntry>();
  /** alias → model id */
  private aliasMap = new Map<string, string>();
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
      this.loading = Promise.all([listModels(this.db), listAliases(this.db), listDeployments(this.db)])
        .then(([rows, aliases, deployments]) => {
          const byModel = new Map<string, DeploymentRecord[]>();
          for (const d of deployments) byModel.set(d.model_id, [...(byModel.get(d.model_id) ?? []), d]);
          this.models = new Map(rows.map((m) => [m.id, withFingerprint(m, byModel.get(m.id))]));
          this.aliasMap = new Map(aliases.map((a) => [a.alias, a.model_id]));
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

  /** The model a client names: a catalog id, or an alias of one. */
  async resolve(name: string): Promise<CatalogEntry | undefined> {
    const hit = this.models.get(name);
    if (hit) return hit;
    const target = this.aliasMap.get(name);
    if (target !== undefined) return this.get(target);
    const missedAt = this.misses.get(name);
    if (missedAt !== undefined && Date.now() - missedAt < MISS_TTL_MS) return undefined;
    // a model or an alias added a moment ago works at once
    const model = await this.fetch(name);
    if (model) return model;
    const aliased = await getAlias(this.db, name);
    if (aliased === null) return undefined;
    this.aliasMap.set(name, aliased);
    return this.get(aliased);
  }

  /** alias → model id, for /models. */
  aliases(): Map<string, string> {
    return this.aliasMap;
  }

  /** Reads one model from the database now (a worker whose entry disagrees with a job's). */
  async fetch(id: string): Promise<CatalogEntry | undefined> {
    const found = await getModel(this.db, id);
    if (found) {
      const entry = withFingerprint(found, await listDeployments(this.db, id));
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
