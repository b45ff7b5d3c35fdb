import { z } from 'zod';
import type { DbClient } from './pool.ts';

export const MODEL_ID_RE = /^[a-z0-9][a-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._:-]*$/;

export const PROTOCOLS = ['sim', 'openai', 'anthropic', 'azure', 'bedrock', 'gemini'] as const;
export type Protocol = (typeof PROTOCOLS)[number];
export const MODALITIES = ['text', 'image', 'audio', 'file'] as const;
export const MODEL_KINDS = ['chat', 'embedding'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];
export type Modality = (typeof MODALITIES)[number];
/** How a batch's lines run on a deployment (docs/batch.md): its own batch API, catraca's queue, or not at all. */
export const BATCH_MODES = ['vendor', 'queue', 'none'] as const;
export type BatchMode = (typeof BATCH_MODES)[number];

/** The protocol a pool's workers speak when `model set` is not told (the pool names of `npm start`). */
export function defaultProtocol(pool: string): Protocol {
  return pool === 'sim' ? 'sim' : pool === 'anthropic' ? 'anthropic' : 'openai';
}

export interface ModelRecord {
  id: string;
  pool: string;
  protocol: Protocol;
  upstream_model: string;
  base_url: string | null;
  api_key_env: string | null;
  input_price: bigint; // micro-BRL per 1M tokens
  output_price: bigint;
  /** input read from the vendor's prompt cache; null: the input price */
  cached_input_price: bigint | null;
  /** input written to the vendor's prompt cache (default lifetime); null: the input price */
  cache_write_price: bigint | null;
  /** input written to the vendor's prompt cache for one hour; null: the input price */
  cache_write_1h_price: bigint | null;
  /** what a batch line is billed at (docs/batch.md); null: the online price */
  batch_input_price: bigint | null;
  batch_output_price: bigint | null;
  batch_cached_input_price: bigint | null;
  batch_cache_write_price: bigint | null;
  batch_cache_write_1h_price: bigint | null;
  /** how batch lines run on the primary deployment (migration 085) */
  batch_mode: BatchMode;
  context_length: number;
  max_output_tokens: number;
  /** content-part kinds accepted; always includes 'text' */
  input_modalities: Modality[];
  /** most prompt tokens one image can cost at the vendor; null: the whole context */
  image_input_tokens: number | null;
  /** request fields beyond the protocol's own that this upstream accepts (forwarded) */
  extra_params: string[];
  /** chat (chat completions, messages, responses, legacy completions) or embedding */
  kind: ModelKind;
  /** the vendor has its own legacy /completions endpoint */
  legacy_completions: boolean;
  /** the first (primary) deployment's weight among the model's deployments */
  weight: number;
  /** the model reasons: OpenRouter's `reasoning` maps to its reasoning effort or thinking budget */
  reasoning: boolean;
  /** the operator gave context_length (else it is the 128 000 default, and prompt bounds are not capped by it) */
  context_length_set: boolean;
  name: string | null;
  description: string | null;
  created_at: Date;
  updated_at: Date;
}

export const ModelInputSchema = z.object({
  id: z.string().regex(MODEL_ID_RE, 'model id must look like vendor/name'),
  pool: z.string().regex(/^[a-z0-9_-]+$/, 'pool must be [a-z0-9_-]+'),
  protocol: z.enum(PROTOCOLS).optional(),
  upstream_model: z.string().min(1),
  base_url: z.string().url().nullable().default(null),
  api_key_env: z
    .string()
    .regex(/^[A-Z_][A-Z0-9_]*$/, 'api-key-env must be an environment variable name')
    .nullable()
    .default(null),
  input_price: z.bigint().nonnegative(),
  output_price: z.bigint().nonnegative(),
  cached_input_price: z.bigint().nonnegative().nullable().default(null),
  cache_write_price: z.bigint().nonnegative().nullable().default(null),
  cache_write_1h_price: z.bigint().nonnegative().nullable().default(null),
  batch_input_price: z.bigint().nonnegative().nullable().default(null),
  batch_output_price: z.bigint().nonnegative().nullable().default(null),
  batch_cached_input_price: z.bigint().nonnegative().nullable().default(null),
  batch_cache_write_price: z.bigint().nonnegative().nullable().default(null),
  batch_cache_write_1h_price: z.bigint().nonnegative().nullable().default(null),
  batch_mode: z.enum(BATCH_MODES).default('queue'),
  context_length: z.number().int().positive().default(128000),
  max_output_tokens: z.number().int().positive().default(4096),
  input_modalities: z
    .array(z.enum(MODALITIES))
    .default(['text'])
    .refine((m) => m.includes('text'), 'input modalities must include text'),
  image_input_tokens: z.number().int().positive().nullable().default(null),
  extra_params: z.array(z.string().regex(/^[a-z_][a-z0-9_]*$/, 'extra params are field names like top_k')).default([]),
  kind: z.enum(MODEL_KINDS).default('chat'),
  legacy_completions: z.boolean().default(false),
  weight: z.number().int().min(1).max(1000).default(1),
  reasoning: z.boolean().default(false),
  /** default: whether context_length was given */
  context_length_set: z.boolean().optional(),
  name: z.string().nullable().default(null),
  description: z.string().nullable().default(null),
});
export type ModelInput = z.input<typeof ModelInputSchema>;

export async function upsertModel(db: DbClient, input: ModelInput): Promise<ModelRecord> {
  const m = ModelInputSchema.parse(input);
  const contextLengthSet = m.context_length_set ?? input.context_length !== undefined;
  const { rows } = await db.query(
    `insert into models (id, pool, upstream_model, base_url, api_key_env, input_price, output_price,
                         context_length, max_output_tokens, name, description,
                         protocol, input_modalities, image_input_tokens, extra_params, kind, legacy_completions,
                         cached_input_price, cache_write_price, cache_write_1h_price, weight, reasoning, context_length_set,
                         batch_input_price, batch_output_price, batch_cached_input_price, batch_cache_write_price,
                         batch_cache_write_1h_price, batch_mode)
     values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27,$28,$29)
     on conflict (id) do update set pool = excluded.pool, upstream_model = excluded.upstream_model,
       protocol = excluded.protocol, input_modalities = excluded.input_modalities,
       image_input_tokens = excluded.image_input_tokens, extra_params = excluded.extra_params,
       base_url = excluded.base_url, api_key_env = excluded.api_key_env, input_price = excluded.input_price,
       output_price = excluded.output_price, context_length = excluded.context_length,
       max_output_tokens = excluded.max_output_tokens, name = excluded.name, description = excluded.description,
       kind = excluded.kind, legacy_completions = excluded.legacy_completions,
       cached_input_price = excluded.cached_input_price, cache_write_price = excluded.cache_write_price,
       cache_write_1h_price = excluded.cache_write_1h_price, weight = excluded.weight, reasoning = excluded.reasoning,
       context_length_set = excluded.context_length_set, batch_input_price = excluded.batch_input_price,
       batch_output_price = excluded.batch_output_price, batch_cached_input_price = excluded.batch_cached_input_price,
       batch_cache_write_price = excluded.batch_cache_write_price, batch_cache_write_1h_price = excluded.batch_cache_write_1h_price,
       batch_mode = excluded.batch_mode, updated_at = now()
     returning *`,
    [
      m.id,
      m.pool,
      m.upstream_model,
      m.base_url,
      m.api_key_env,
      m.input_price,
      m.output_price,
      m.context_length,
      m.max_output_tokens,
      m.name,
      m.description,
      m.protocol ?? defaultProtocol(m.pool),
      m.input_modalities,
      m.image_input_tokens,
      m.extra_params,
      m.kind,
      m.legacy_completions,
      m.cached_input_price,
      m.cache_write_price,
      m.cache_write_1h_price,
      m.weight,
      m.reasoning,
      contextLengthSet,
      m.batch_input_price,
      m.batch_output_price,
      m.batch_cached_input_price,
      m.batch_cache_write_price,
      m.batch_cache_write_1h_price,
      m.batch_mode,
    ],
  );
  return rows[0];
}

export async function getModel(db: DbClient, id: string): Promise<ModelRecord | null> {
  const { rows } = await db.query('select * from models where id = $1', [id]);
  return rows[0] ?? null;
}

export async function listModels(db: DbClient): Promise<ModelRecord[]> {
  const { rows } = await db.query('select * from models order by id');
  return rows;
}

/** An alias: another name for a catalog model (e.g. the model names agents send by default). */
export interface ModelAlias {
  alias: string;
  model_id: string;
  created_at: Date;
}

export const ALIAS_RE = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$/;

export async function listAliases(db: DbClient): Promise<ModelAlias[]> {
  const { rows } = await db.query('select alias, model_id, created_at from model_aliases order by alias');
  return rows;
}

/** The model an alias names, or null. */
export async function getAlias(db: DbClient, alias: string): Promise<string | null> {
  const { rows } = await db.query('select model_id from model_aliases where alias = $1', [alias]);
  return rows[0]?.model_id ?? null;
}

/** Adds or moves an alias; an alias may not be the id of a catalog model. */
export async function setAlias(db: DbClient, alias: string, modelId: string): Promise<ModelAlias> {
  const { rows } = await db.query(
    `insert into model_aliases (alias, model_id) values ($1, $2)
     on conflict (alias) do update set model_id = excluded.model_id returning alias, model_id, created_at`,
    [alias, modelId],
  );
  return rows[0];
}

export async function removeAlias(db: DbClient, alias: string): Promise<boolean> {
  const { rowCount } = await db.query('delete from model_aliases where alias = $1', [alias]);
  return (rowCount ?? 0) > 0;
}

/** A deployment of a catalog model beyond its primary one (the model's own row). */
export interface DeploymentRecord {
  id: string;
  model_id: string;
  name: string;
  protocol: Protocol;
  base_url: string | null;
  api_key_env: string | null;
  upstream_model: string;
  weight: number;
  input_price: bigint | null;
  output_price: bigint | null;
  cached_input_price: bigint | null;
  cache_write_price: bigint | null;
  cache_write_1h_price: bigint | null;
  /** batch prices; null: the model's batch price, else the online price */
  batch_input_price: bigint | null;
  batch_output_price: bigint | null;
  batch_cached_input_price: bigint | null;
  batch_cache_write_price: bigint | null;
  batch_cache_write_1h_price: bigint | null;
  /** how batch lines run on this deployment (migration 085) */
  batch_mode: BatchMode;
  /** the vendor's region it runs in (sa-east-1, brazilsouth, southamerica-east1), as the operator said */
  region: string | null;
  /** the country it runs in (ISO 3166-1 alpha-2): keys with a data country go only to deployments there */
  country: string | null;
  created_at: Date;
}

export const DEPLOYMENT_NAME_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;

export const DeploymentInputSchema = z.object({
  model_id: z.string().regex(MODEL_ID_RE),
  name: z
    .string()
    .regex(DEPLOYMENT_NAME_RE, 'a deployment name is lower-case letters, digits, . _ -')
    .refine((n) => n !== 'primary', "'primary' names the model's own deployment"),
  protocol: z.enum(PROTOCOLS),
  base_url: z.string().url().nullable().default(null),
  api_key_env: z
    .string()
    .regex(/^[A-Z_][A-Z0-9_]*$/, 'api-key-env must be an environment variable name')
    .nullable()
    .default(null),
  upstream_model: z.string().min(1),
  weight: z.number().int().min(1).max(1000).default(1),
  input_price: z.bigint().nonnegative().nullable().default(null),
  output_price: z.bigint().nonnegative().nullable().default(null),
  cached_input_price: z.bigint().nonnegative().nullable().default(null),
  cache_write_price: z.bigint().nonnegative().nullable().default(null),
  cache_write_1h_price: z.bigint().nonnegative().nullable().default(null),
  batch_input_price: z.bigint().nonnegative().nullable().default(null),
  batch_output_price: z.bigint().nonnegative().nullable().default(null),
  batch_cached_input_price: z.bigint().nonnegative().nullable().default(null),
  batch_cache_write_price: z.bigint().nonnegative().nullable().default(null),
  batch_cache_write_1h_price: z.bigint().nonnegative().nullable().default(null),
  batch_mode: z.enum(BATCH_MODES).default('queue'),
  region: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, 'a region is lower-case letters, digits and -')
    .nullable()
    .default(null),
  country: z
    .string()
    .regex(/^[A-Z]{2}$/, 'a country is two capital letters (ISO 3166-1 alpha-2, like BR)')
    .nullable()
    .default(null),
});
export type DeploymentInput = z.input<typeof DeploymentInputSchema>;

export async function addDeployment(db: DbClient, id: string, input: DeploymentInput): Promise<DeploymentRecord> {
  const d = DeploymentInputSchema.parse(input);
  const { rows } = await db.query(
    `insert into model_deployments (id, model_id, name, protocol, base_url, api_key_env, upstream_model, weight,
                                    input_price, output_price, cached_input_price, cache_write_price, cache_write_1h_price,
                                    region, country, batch_input_price, batch_output_price, batch_cached_input_price,
                                    batch_cache_write_price, batch_cache_write_1h_price, batch_mode)
     values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21) returning *`,
    [
      id,
      d.model_id,
      d.name,
      d.protocol,
      d.base_url,
      d.api_key_env,
      d.upstream_model,
      d.weight,
      d.input_price,
      d.output_price,
      d.cached_input_price,
      d.cache_write_price,
      d.cache_write_1h_price,
      d.region,
      d.country,
      d.batch_input_price,
      d.batch_output_price,
      d.batch_cached_input_price,
      d.batch_cache_write_price,
      d.batch_cache_write_1h_price,
      d.batch_mode,
    ],
  );
  return rows[0];
}

export async function listDeployments(db: DbClient, modelId?: string): Promise<DeploymentRecord[]> {
  const { rows } = modelId
    ? await db.query('select * from model_deployments where model_id = $1 order by created_at, id', [modelId])
    : await db.query('select * from model_deployments order by model_id, created_at, id');
  return rows;
}

export async function removeDeployment(db: DbClient, id: string): Promise<DeploymentRecord | null> {
  const { rows } = await db.query('delete from model_deployments where id = $1 returning *', [id]);
  return rows[0] ?? null;
}

/** A deployment's prices and weight (null prices: the model's); the CLI re-adds a deployment to change anything else. */
export async function updateDeploymentPrices(
  db: DbClient,
  id: string,
  p: { input_price: bigint | null; output_price: bigint | null; cached_input_price: bigint | null; weight: number },
): Promise<DeploymentRecord | null> {
  const { rows } = await db.query(
    'update model_deployments set input_price = $2, output_price = $3, cached_input_price = $4, weight = $5 where id = $1 returning *',
    [id, p.input_price, p.output_price, p.cached_input_price, p.weight],
  );
  return rows[0] ?? null;
}
