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

const INSERT_COLUMNS = 'id, tenant_id, key_id, model, request_id, input_items, output_items, params, usage, status, created_at, expires_at';

function rowOf(r: NewStoredResponse): unknown[] {
  return [
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
  ];
}

/** Saves a response; a U+0000 in what the vendor answered (jsonb refuses it) is stored as U+FFFD. */
export async function saveResponse(db: DbClient, r: NewStoredResponse): Promise<void> {
  await db.query(
    `insert into responses (${INSERT_COLUMNS})
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, to_timestamp($11), now() + make_interval(days => $12))`,
    rowOf(r),
  );
}

/** Saves several responses in one statement (one array per column). */
export async function saveResponses(db: DbClient, list: NewStoredResponse[]): Promise<void> {
  const rows = list.map(rowOf);
  const columns = rows[0].map((_, c) => rows.map((row) => row[c]));
  await db.query(
    `insert into responses (${INSERT_COLUMNS})
     select id, tenant_id, key_id, model, request_id, input_items::jsonb, output_items::jsonb, params::jsonb, usage::jsonb,
            status, to_timestamp(created_at), now() + make_interval(days => retention_days)
       from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                   $10::text[], $11::float8[], $12::int[])
         as r(id, tenant_id, key_id, model, request_id, input_items, output_items, params, usage, status, created_at, retention_days)`,
    columns,
  );
}

/**
 * Group commit of the responses a front door stores: one insert in flight at a time; responses that
 * end meanwhile go together in the next one. A quiet door pays one plain round trip per response
 * (no added wait); a busy one writes a row per response but a statement per batch, which is most of
 * what a stored response cost the door (its share of `bench/run-stack.ts --route chat,responses`).
 */
export class ResponseSaver {
  private queue: Array<{ r: NewStoredResponse; resolve: () => void; reject: (err: unknown) => void }> = [];
  private busy = false;

  constructor(
    private readonly db: DbClient,
    private readonly maxBatch = 256,
  ) {}

  save(r: NewStoredResponse): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ r, resolve, reject });
      if (!this.busy) this.flush();
    });
  }

  private flush(): void {
    const batch = this.queue.splice(0, this.maxBatch);
    if (batch.length === 0) return;
    this.busy = true;
    const list = batch.map((p) => p.r);
    (list.length === 1 ? saveResponse(this.db, list[0]) : saveResponses(this.db, list))
      .then(
        () => {
          for (const p of batch) p.resolve();
        },
        (err) => {
          for (const p of batch) p.reject(err);
        },
      )
      .finally(() => {
        this.busy = false;
        this.flush();
      });
  }
}

const savers = new WeakMap<DbClient, ResponseSaver>();

/** The saver of this pool (one per front door). */
export function responseSaver(db: DbClient): ResponseSaver {
  let saver = savers.get(db);
  if (!saver) savers.set(db, (saver = new ResponseSaver(db)));
  return saver;
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
