import { subjects } from '../../bus/subjects.ts';
import { type GivenModel, setModel } from '../../catalog/model-set.ts';
import {
  ALIAS_RE,
  BATCH_MODES,
  getModel,
  listAliases,
  listModels,
  MODALITIES,
  MODEL_ID_RE,
  MODEL_KINDS,
  type ModelInput,
  type ModelRecord,
  PROTOCOLS,
  removeAlias,
  setAlias,
} from '../../db/models.ts';
import type { Db } from '../../db/pool.ts';
import { brlFlag, brlString, type Flags, intFlag, parseFlags, str } from '../args.ts';
import { CliError, type CliContext, UsageError } from '../context.ts';
import { checkUpstreamKey } from './deployment.ts';
import { broadcast, plainTable, withDb } from './shared.ts';
import { saveUsdPrices, USD_FLAGS, usdFlags, usdToBrl } from './usd.ts';
import { vertexBaseUrlFlag } from './vertex.ts';

/** The batch price flags of `model set` and `model deployment add` (BRL per 1M tokens; '' or 'none': not set, the online price applies). */
export const BATCH_PRICE_FLAGS = [
  'batch-input-price',
  'batch-output-price',
  'batch-cached-input-price',
  'batch-cache-write-price',
  'batch-cache-write-1h-price',
];

const MODEL_SET_FLAGS = [
  'id',
  'pool',
  'protocol',
  'kind',
  'upstream-model',
  'base-url',
  'api-key-env',
  'input-price',
  'output-price',
  'cached-input-price',
  'cache-write-price',
  'cache-write-1h-price',
  ...BATCH_PRICE_FLAGS,
  'batch',
  'max-output-tokens',
  'context-length',
  'modalities',
  'image-tokens',
  'extra-params',
  'legacy-completions',
  'reasoning',
  'weight',
  'vertex-project',
  'region',
  'name',
  'description',
  ...USD_FLAGS,
];

const announce = (ctx: CliContext, model: string) =>
  // front doors and workers reload their catalogs now (otherwise within 5 s)
  broadcast(ctx, subjects.catalogChanged, { model }, 'saved in the catalog', 'front doors and workers reload their catalogs within 5 s');

export async function modelSet(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'model set';
  const flags = parseFlags(args, { values: MODEL_SET_FLAGS, required: ['id', 'pool'] }, cmd);
  const brlGiven = str(flags, 'input-price') !== undefined || str(flags, 'output-price') !== undefined;
  const usd = usdFlags(flags, cmd, brlGiven);
  if (!usd && (str(flags, 'input-price') === undefined || str(flags, 'output-price') === undefined))
    throw new UsageError(`${cmd}: --input-price and --output-price (BRL), or --usd-input-price and --usd-output-price (USD, with --markup)`);
  const m = await withDb(ctx, async (db) => {
    let given: GivenModel;
    let rate: { micros: bigint; date: string } | undefined;
    if (usd) {
      const r = await usdToBrl(db, usd, cmd);
      rate = r.rate;
      given = modelFlags(flags, cmd, r.prices);
    } else given = modelFlags(flags, cmd);
    const saved = await setModel(db, given);
    if (saved.ok) {
      await saveUsdPrices(db, saved.model.id, 'primary', usd, rate);
      if (usd && rate) ctx.warn(`priced from USD at R$ ${brlString(rate.micros)} per dollar (${rate.date}); recomputed at each new PTAX`);
      return saved.model;
    }
    switch (saved.error.code) {
      case 'is_alias':
        throw new CliError(`${cmd}: ${given.id} is an alias; remove it first (catraca model alias remove --alias ${given.id})`);
      case 'context_length_required':
        throw new UsageError(`${cmd}: --context-length is required for a new model (its context window in tokens, from the vendor)`);
      case 'embedding_protocol':
        throw new UsageError(`${cmd}: a model of kind embedding needs a vendor protocol with an embeddings API (sim or openai), not ${saved.error.protocol}`);
    }
  });
  ctx.out(
    modelView(m),
    `model ${m.id}: pool ${m.pool} (${m.protocol}, ${m.kind}), upstream ${m.upstream_model}, R$ ${brlString(m.input_price)} in / R$ ${brlString(m.output_price)} out per 1M tokens`,
  );
  await announce(ctx, m.id);
  // checked when named in this call (not on every price change of a model that keeps its key)
  const keyEnv = str(flags, 'api-key-env');
  if (keyEnv) await checkUpstreamKey(ctx, m.pool, keyEnv);
}

function modelFlags(
  flags: Flags,
  cmd: string,
  fromUsd?: {
    input_price: bigint;
    output_price: bigint;
    cached_input_price: bigint | null;
    cache_write_price: bigint | null;
    cache_write_1h_price: bigint | null;
  },
): GivenModel {
  const id = str(flags, 'id')!;
  if (!MODEL_ID_RE.test(id)) throw new UsageError(`${cmd}: --id must look like vendor/name, got ${JSON.stringify(id)}`);
  const pool = str(flags, 'pool')!;
  if (!/^[a-z0-9_-]+$/.test(pool)) throw new UsageError(`${cmd}: --pool must be lower-case letters, digits, _ or -`);
  const given = str(flags, 'base-url');
  if (given && !/^https?:$/.test(safeUrl(given)?.protocol ?? '')) throw new UsageError(`${cmd}: --base-url must be an http(s) URL`);
  const baseUrl = vertexBaseUrlFlag(flags, cmd, str(flags, 'protocol')) ?? given;
  const apiKeyEnv = str(flags, 'api-key-env');
  if (apiKeyEnv && !/^[A-Z_][A-Z0-9_]*$/.test(apiKeyEnv)) {
    throw new UsageError(`${cmd}: --api-key-env is the NAME of an environment variable holding the upstream key (like OPENAI_API_KEY), never the key itself`);
  }
  const protocol = oneOf(flags, 'protocol', PROTOCOLS, cmd);
  const kind = oneOf(flags, 'kind', MODEL_KINDS, cmd);
  const modalities = list(flags, 'modalities');
  if (modalities && (!modalities.includes('text') || modalities.some((m) => !(MODALITIES as readonly string[]).includes(m)))) {
    throw new UsageError(`${cmd}: --modalities is a list of ${MODALITIES.join(', ')} that includes text`);
  }
  const extraParams = list(flags, 'extra-params');
  if (extraParams?.some((p) => !/^[a-z_][a-z0-9_]*$/.test(p))) throw new UsageError(`${cmd}: --extra-params is a list of request field names like top_k,min_p`);
  const imageTokensText = str(flags, 'image-tokens');
  const legacy = oneOf(flags, 'legacy-completions', ['true', 'false'] as const, cmd);
  const reasoning = oneOf(flags, 'reasoning', ['true', 'false'] as const, cmd);
  const weight = intFlag(flags, 'weight', cmd);
  if (weight !== undefined && weight > 1000) throw new UsageError(`${cmd}: --weight is 1 to 1000`);
  return {
    id,
    pool,
    input_price: fromUsd?.input_price ?? brlFlag(flags, 'input-price', cmd)!,
    output_price: fromUsd?.output_price ?? brlFlag(flags, 'output-price', cmd)!,
    cached_input_price: fromUsd ? fromUsd.cached_input_price : optionalPrice(flags, 'cached-input-price', cmd),
    cache_write_price: fromUsd ? fromUsd.cache_write_price : optionalPrice(flags, 'cache-write-price', cmd),
    cache_write_1h_price: fromUsd ? fromUsd.cache_write_1h_price : optionalPrice(flags, 'cache-write-1h-price', cmd),
    ...batchPriceFlags(flags, cmd),
    batch_mode: oneOf(flags, 'batch', BATCH_MODES, cmd),
    protocol,
    kind,
    upstream_model: str(flags, 'upstream-model') || undefined,
    // an empty string clears base-url/api-key-env
    base_url: baseUrl === undefined ? undefined : baseUrl || null,
    api_key_env: apiKeyEnv === undefined ? undefined : apiKeyEnv || null,
    max_output_tokens: intFlag(flags, 'max-output-tokens', cmd),
    context_length: intFlag(flags, 'context-length', cmd),
    input_modalities: modalities as ModelInput['input_modalities'],
    image_input_tokens:
      imageTokensText === undefined ? undefined : imageTokensText === '' || imageTokensText === 'none' ? null : intFlag(flags, 'image-tokens', cmd)!,
    extra_params: extraParams,
    legacy_completions: legacy === undefined ? undefined : legacy === 'true',
    reasoning: reasoning === undefined ? undefined : reasoning === 'true',
    weight,
    name: str(flags, 'name'),
    description: str(flags, 'description'),
  };
}

/** The batch prices given: undefined where a flag is absent (`model set` keeps the current value), null where cleared. */
export function batchPriceFlags(flags: Flags, cmd: string) {
  return {
    batch_input_price: optionalPrice(flags, 'batch-input-price', cmd),
    batch_output_price: optionalPrice(flags, 'batch-output-price', cmd),
    batch_cached_input_price: optionalPrice(flags, 'batch-cached-input-price', cmd),
    batch_cache_write_price: optionalPrice(flags, 'batch-cache-write-price', cmd),
    batch_cache_write_1h_price: optionalPrice(flags, 'batch-cache-write-1h-price', cmd),
  };
}

/** A price flag that may be cleared: '' or 'none' → null (the input price applies). */
export function optionalPrice(flags: Flags, name: string, cmd: string): bigint | null | undefined {
  const v = str(flags, name);
  if (v === undefined) return undefined;
  if (v === '' || v === 'none') return null;
  return brlFlag(flags, name, cmd);
}

function safeUrl(text: string): URL | null {
  try {
    return new URL(text);
  } catch {
    return null;
  }
}

function oneOf<T extends string>(flags: Flags, name: string, values: readonly T[], cmd: string): T | undefined {
  const v = str(flags, name);
  if (v !== undefined && !(values as readonly string[]).includes(v)) throw new UsageError(`${cmd}: --${name} must be one of ${values.join(', ')}`);
  return v as T | undefined;
}

function list(flags: Flags, name: string): string[] | undefined {
  const v = str(flags, name);
  return v === undefined
    ? undefined
    : v
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);
}

/** Batch prices as the CLI shows them (null: not set, the online price applies). */
export function batchPriceView(
  p: Pick<ModelRecord, 'batch_input_price' | 'batch_output_price' | 'batch_cached_input_price' | 'batch_cache_write_price' | 'batch_cache_write_1h_price'>,
) {
  const brl = (v: bigint | null | undefined) => (v === null || v === undefined ? null : brlString(v));
  return {
    batch_input_price: brl(p.batch_input_price),
    batch_output_price: brl(p.batch_output_price),
    batch_cached_input_price: brl(p.batch_cached_input_price),
    batch_cache_write_price: brl(p.batch_cache_write_price),
    batch_cache_write_1h_price: brl(p.batch_cache_write_1h_price),
  };
}

export function modelView(m: ModelRecord) {
  return {
    id: m.id,
    pool: m.pool,
    protocol: m.protocol,
    kind: m.kind,
    upstream_model: m.upstream_model,
    base_url: m.base_url,
    api_key_env: m.api_key_env,
    input_price: brlString(m.input_price),
    output_price: brlString(m.output_price),
    cached_input_price: m.cached_input_price === null ? null : brlString(m.cached_input_price),
    cache_write_price: m.cache_write_price === null ? null : brlString(m.cache_write_price),
    cache_write_1h_price: m.cache_write_1h_price === null ? null : brlString(m.cache_write_1h_price),
    ...batchPriceView(m),
    batch_mode: m.batch_mode,
    max_output_tokens: m.max_output_tokens,
    context_length: m.context_length,
    context_length_set: m.context_length_set,
    input_modalities: m.input_modalities,
    image_input_tokens: m.image_input_tokens,
    extra_params: m.extra_params,
    legacy_completions: m.legacy_completions,
    reasoning: m.reasoning,
    weight: m.weight,
  };
}

export async function modelList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'model list');
  const models = (await withDb(ctx, (db) => listModels(db))).map(modelView);
  ctx.out(
    { models },
    plainTable(
      ['ID', 'POOL', 'PROTOCOL', 'UPSTREAM', 'IN BRL/1M', 'OUT BRL/1M', 'MAX OUT', 'CONTEXT', 'KIND'],
      models.map((m) => [
        m.id,
        m.pool,
        m.protocol,
        m.upstream_model,
        m.input_price,
        m.output_price,
        String(m.max_output_tokens),
        String(m.context_length),
        m.kind,
      ]),
      [4, 5, 6, 7],
      '(no models in the catalog; add one with catraca model set)',
    ),
  );
}

// ------------------------------------------------------------------------------------ aliases

export async function aliasAdd(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'model alias add';
  const flags = parseFlags(args, { values: ['alias', 'model'], required: ['alias', 'model'] }, cmd);
  const alias = str(flags, 'alias')!;
  const model = str(flags, 'model')!;
  if (!ALIAS_RE.test(alias)) throw new UsageError(`${cmd}: --alias must be 1 to 200 letters, digits and . _ : @ / -, starting with a letter or digit`);
  const saved = await withDb(ctx, async (db: Db) => {
    if (await getModel(db, alias)) throw new CliError(`${cmd}: ${alias} is a catalog model's id; an alias cannot hide it`);
    if (!(await getModel(db, model))) throw new CliError(`${cmd}: unknown model ${model} (see catraca model list)`);
    return setAlias(db, alias, model);
  });
  ctx.out({ alias: saved.alias, model: saved.model_id }, `alias ${saved.alias} → ${saved.model_id}`);
  await announce(ctx, saved.model_id);
}

export async function aliasList(ctx: CliContext, args: string[]): Promise<void> {
  parseFlags(args, { values: [] }, 'model alias list');
  const aliases = (await withDb(ctx, (db) => listAliases(db))).map((a) => ({ alias: a.alias, model: a.model_id }));
  ctx.out(
    { aliases },
    plainTable(
      ['ALIAS', 'MODEL'],
      aliases.map((a) => [a.alias, a.model]),
      [],
      '(no aliases; add one with catraca model alias add)',
    ),
  );
}

export async function aliasRemove(ctx: CliContext, args: string[]): Promise<void> {
  const cmd = 'model alias remove';
  const flags = parseFlags(args, { values: ['alias'], required: ['alias'] }, cmd);
  const alias = str(flags, 'alias')!;
  const removed = await withDb(ctx, (db) => removeAlias(db, alias));
  if (!removed) throw new CliError(`${cmd}: no alias ${JSON.stringify(alias)}`);
  ctx.out({ alias, removed: true }, `removed alias ${alias}`);
  await announce(ctx, alias);
}
