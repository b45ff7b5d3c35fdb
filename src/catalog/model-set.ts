import { speaksNatively } from './apis.ts';
import { defaultProtocol, getModel, type ModelInput, type ModelRecord, upsertModel } from '../db/models.ts';
import type { DbClient } from '../db/pool.ts';

// What `catraca model set` does to the catalog, shared with the operator's console (src/console/):
// the options given, checked, over the entry's current values; then an upsert. The caller
// announces the change on NATS (announceCatalogChange, src/catalog/catalog.ts) so that every front
// door and worker reloads at once.

/** What a `model set` was told: each option given; undefined where not given (the current value stays). */
export type GivenModel = { id: string; pool: string; input_price: bigint; output_price: bigint } & Partial<
  Omit<ModelInput, 'id' | 'pool' | 'input_price' | 'output_price'>
>;

export type ModelSetError = { code: 'is_alias' } | { code: 'context_length_required' } | { code: 'embedding_protocol'; protocol: string | undefined };

/** Saves a catalog entry: `given` over the current one (or the defaults); refused for an alias, a new model without context length, an embedding model no protocol serves. */
export async function setModel(
  db: DbClient,
  given: GivenModel,
): Promise<{ ok: true; model: ModelRecord; previous: ModelRecord | null } | { ok: false; error: ModelSetError }> {
  if ((await db.query('select 1 from model_aliases where alias = $1', [given.id])).rowCount) return { ok: false, error: { code: 'is_alias' } };
  const previous = await getModel(db, given.id);
  // the prompt bound of every request is capped by it: a guess would under-hold a larger model
  if (!previous && given.context_length === undefined) return { ok: false, error: { code: 'context_length_required' } };
  const entry = withPrevious(given, previous);
  if (entry.kind === 'embedding' && !speaksNatively({ protocol: entry.protocol ?? defaultProtocol(entry.pool), legacy_completions: false }, 'embeddings')) {
    return { ok: false, error: { code: 'embedding_protocol', protocol: entry.protocol } };
  }
  return { ok: true, model: await upsertModel(db, entry), previous };
}

/** The entry to store: what was given, else the current value, else the default. */
export function withPrevious(g: GivenModel, prev: ModelRecord | null): ModelInput {
  const keep = <K extends keyof ModelRecord>(k: K, fallback: ModelRecord[K]): ModelRecord[K] =>
    (g[k as keyof GivenModel] as ModelRecord[K]) ?? prev?.[k] ?? fallback;
  return {
    id: g.id,
    pool: g.pool,
    protocol: g.protocol ?? (prev && prev.pool === g.pool ? prev.protocol : defaultProtocol(g.pool)),
    kind: keep('kind', 'chat'),
    upstream_model: g.upstream_model || prev?.upstream_model || g.id.slice(g.id.indexOf('/') + 1),
    base_url: g.base_url === undefined ? (prev?.base_url ?? null) : g.base_url,
    api_key_env: g.api_key_env === undefined ? (prev?.api_key_env ?? null) : g.api_key_env,
    input_price: g.input_price,
    output_price: g.output_price,
    cached_input_price: g.cached_input_price === undefined ? (prev?.cached_input_price ?? null) : g.cached_input_price,
    cache_write_price: g.cache_write_price === undefined ? (prev?.cache_write_price ?? null) : g.cache_write_price,
    cache_write_1h_price: g.cache_write_1h_price === undefined ? (prev?.cache_write_1h_price ?? null) : g.cache_write_1h_price,
    batch_input_price: g.batch_input_price === undefined ? (prev?.batch_input_price ?? null) : g.batch_input_price,
    batch_output_price: g.batch_output_price === undefined ? (prev?.batch_output_price ?? null) : g.batch_output_price,
    batch_cached_input_price: g.batch_cached_input_price === undefined ? (prev?.batch_cached_input_price ?? null) : g.batch_cached_input_price,
    batch_cache_write_price: g.batch_cache_write_price === undefined ? (prev?.batch_cache_write_price ?? null) : g.batch_cache_write_price,
    batch_cache_write_1h_price: g.batch_cache_write_1h_price === undefined ? (prev?.batch_cache_write_1h_price ?? null) : g.batch_cache_write_1h_price,
    batch_mode: keep('batch_mode', 'queue'),
    max_output_tokens: keep('max_output_tokens', 4096),
    context_length: keep('context_length', 128000),
    context_length_set: g.context_length !== undefined || (prev?.context_length_set ?? false),
    input_modalities: keep('input_modalities', ['text']),
    image_input_tokens: g.image_input_tokens === undefined ? (prev?.image_input_tokens ?? null) : g.image_input_tokens,
    extra_params: keep('extra_params', []),
    legacy_completions: keep('legacy_completions', false),
    reasoning: keep('reasoning', false),
    weight: keep('weight', 1),
    name: keep('name', null),
    description: keep('description', null),
  };
}
