import { z } from 'zod';
import type { DbClient } from './pool.ts';

export const MODEL_ID_RE = /^[a-z0-9][a-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._:-]*$/;

export const PROTOCOLS = ['sim', 'openai', 'anthropic'] as const;
export type Protocol = (typeof PROTOCOLS)[number];
export const MODALITIES = ['text', 'image', 'audio', 'file'] as const;
export type Modality = (typeof MODALITIES)[number];

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
  context_length: number;
  max_output_tokens: number;
  /** content-part kinds accepted; always includes 'text' */
  input_modalities: Modality[];
  /** most prompt tokens one image can cost at the vendor; null: the whole context */
  image_input_tokens: number | null;
  /** request fields beyond the protocol's own that this upstream accepts (forwarded) */
  extra_params: string[];
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
  context_length: z.number().int().positive().default(128000),
  max_output_tokens: z.number().int().positive().default(4096),
  input_modalities: z
    .array(z.enum(MODALITIES))
    .default(['text'])
    .refine((m) => m.includes('text'), 'input modalities must include text'),
  image_input_tokens: z.number().int().positive().nullable().default(null),
  extra_params: z.array(z.string().regex(/^[a-z_][a-z0-9_]*$/, 'extra params are field names like top_k')).default([]),
  name: z.string().nullable().default(null),
  description: z.string().nullable().default(null),
});
export type ModelInput = z.input<typeof ModelInputSchema>;

export async function upsertModel(db: DbClient, input: ModelInput): Promise<ModelRecord> {
  const m = ModelInputSchema.parse(input);
  const { rows } = await db.query(
    `insert into models (id, pool, upstream_model, base_url, api_key_env, input_price, output_price,
                         context_length, max_output_tokens, name, description,
                         protocol, input_modalities, image_input_tokens, extra_params)
     values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)
     on conflict (id) do update set pool = excluded.pool, upstream_model = excluded.upstream_model,
       protocol = excluded.protocol, input_modalities = excluded.input_modalities,
       image_input_tokens = excluded.image_input_tokens, extra_params = excluded.extra_params,
       base_url = excluded.base_url, api_key_env = excluded.api_key_env, input_price = excluded.input_price,
       output_price = excluded.output_price, context_length = excluded.context_length,
       max_output_tokens = excluded.max_output_tokens, name = excluded.name, description = excluded.description,
       updated_at = now()
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
