import type { DbClient } from '../../db/pool.ts';
import { jsonbText } from '../stored-text.ts';
import type { Item } from './items.ts';
import type { Echo, ResponseObject, ResponseUsage } from './response.ts';

// Stored responses (table `responses`, src/db/migrations/030_responses.sql): one row per response
// answered with `store` on, per tenant, until its expiry. Every read names the tenant: a response
// of another tenant is not found, exactly like a missing one.

export interface StoredResponse {
  id: string;
  tenant_id: string;
  key_id: string;
  model: string;
  request_id: string;
  input_items: Item[];
  output_items: Item[];
  params: Echo;
  usage: ResponseUsage;
  status: 'completed' | 'incomplete';
  created_at: Date;
}

export interface NewStoredResponse {
  tenantId: string;
  keyId: string;
  requestId: string;
  /** the whole conversation it answered: the previous response's input and output, then this request's input */
  input: Item[];
  response: ResponseObject;
  params: Echo;
  retentionDays: number;
}

/** Saves a response; a U+0000 in what the vendor answered (jsonb refuses it) is stored as U+FFFD. */
export async function saveResponse(db: DbClient, r: NewStoredResponse): Promise<void> {
  await db.query(
    `insert into responses (id, tenant_id, key_id, model, request_id, input_items, output_items, params, usage, status, created_at, expires_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, to_timestamp($11), now() + make_interval(days => $12))`,
    [
      r.response.id,
      r.tenantId,
      r.keyId,
      r.response.model,
      r.requestId,
      jsonbText(r.input),
      jsonbText(r.response.output),
      jsonbText(r.params),
      jsonbText(r.response.usage),
      r.response.status,
      r.response.created_at,
      r.retentionDays,
    ],
  );
}

/** The tenant's response with this id, unless it expired. */
export async function loadResponse(db: DbClient, tenantId: string, id: string): Promise<StoredResponse | null> {
  const { rows } = await db.query<StoredResponse>(
    `select id, tenant_id, key_id, model, request_id, input_items, output_items, params, usage, status, created_at
       from responses where id = $1 and tenant_id = $2 and expires_at > now()`,
    [id, tenantId],
  );
  return rows[0] ?? null;
}

/** Deletes the tenant's response; false when it has none with this id. */
export async function deleteResponse(db: DbClient, tenantId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query('delete from responses where id = $1 and tenant_id = $2 and expires_at > now()', [id, tenantId]);
  return (rowCount ?? 0) > 0;
}
