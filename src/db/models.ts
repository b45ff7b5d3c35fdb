import { z } from 'zod';
import type { DbClient } from './pool.ts';

export const MODEL_ID_RE = /^[a-z0-9][a-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._:-]*$/;

export interface ModelRecord {
  id: string;
  pool: string;
  upstream_model: string;
  base_url: string | null;
  api_key_env: string | null;
  input_price: bigint; // micro-BRL per 1M tokens
  output_price: bigint;
  context_length: number;
  max_output_tokens: number;
  name: string | null;
  description: string | null;
  created_at: Date;
  updated_at: Date;
}

export const ModelInputSchema = z.object({
  id: z.string().regex(MODEL_ID_RE, 'model id must look like vendor/name'),
  pool: z.string().regex(/^[a-z0-9_-]+$/, 'pool must be [a-z0-9_-]+'),
  upstream_model: z.string().min(1),
  base_url: z.string().url().nullable().default(null),
  api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'api-key-env must be an environment variable name').nullable().default(null),
  input_price: z.bigint().nonnegative(),
  output_price: z.bigint().nonnegative(),
  context_length: z.number().int().positive().default(128000),
  max_output_tokens: z.number().int().positive().default(4096),
  name: z.string().nullable().default(null),
  description: z.string().nullable().default(null),
});
export type ModelInput = z.input<typeof ModelInputSchema>;

export async function upsertModel(db: DbClient, input: ModelInput): Promise<ModelRecord> {
  const m = ModelInputSchema.parse(input);
  const { rows } = await db.query(
    `insert into models (id, pool, upstream_model, base_url, api_key_env, input_price, output_price,
                         context_length, max_output_tokens, name, description)
     values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)
     on conflict (id) do update set pool = excluded.pool, upstream_model = excluded.upstream_model,
       base_url = excluded.base_url, api_key_env = excluded.api_key_env, input_price = excluded.input_price,
       output_price = excluded.output_price, context_length = excluded.context_length,
       max_output_tokens = excluded.max_output_tokens, name = excluded.name, description = excluded.description,
       updated_at = now()
     returning *`,
    [m.id, m.pool, m.upstream_model, m.base_url, m.api_key_env, m.input_price, m.output_price,
     m.context_length, m.max_output_tokens, m.name, m.description],
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
