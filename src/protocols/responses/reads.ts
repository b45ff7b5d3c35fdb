import { z } from 'zod';
import type { ApiKeyRecord } from '../../db/keys.ts';
import type { DbClient } from '../../db/pool.ts';
import { CatracaError, errors } from '../../errors.ts';
import { describeIssue } from '../request-body.ts';
import { responseObject } from './response.ts';
import { deleteResponse, loadResponse } from './store.ts';

// GET /v1/responses/{id}, DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items: the
// caller's tenant's stored responses only (another tenant's is not found, like a missing one).

const notFound = (id: string) => new CatracaError(404, 'not_found_error', 'response_not_found', `No response found with id '${id}'.`, 'id');

export async function getResponseBody(db: DbClient, key: ApiKeyRecord, id: string) {
  const r = await loadResponse(db, key.tenant_id, id);
  if (!r) throw notFound(id);
  const createdAt = Math.floor(new Date(r.created_at).getTime() / 1000);
  return responseObject({ id: r.id, created_at: createdAt, model: r.model, status: r.status, output: r.output_items, usage: r.usage }, r.params);
}

export async function deleteResponseBody(db: DbClient, key: ApiKeyRecord, id: string) {
  if (!(await deleteResponse(db, key.tenant_id, id))) throw notFound(id);
  return { id, object: 'response', deleted: true };
}

const ListQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).optional(),
});

/** The conversation a response answered (its input items, a previous response's included), a page at a time. */
export async function inputItemsBody(db: DbClient, key: ApiKeyRecord, id: string, query: URLSearchParams) {
  const parsed = ListQuerySchema.safeParse({
    limit: query.get('limit') ?? undefined,
    order: query.get('order') ?? undefined,
    after: query.get('after') ?? undefined,
  });
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw errors.badRequest(message, param);
  }
  const { limit, order, after } = parsed.data;
  const r = await loadResponse(db, key.tenant_id, id);
  if (!r) throw notFound(id);
  const items = order === 'asc' ? r.input_items : [...r.input_items].reverse();
  let start = 0;
  if (after !== undefined) {
    start = items.findIndex((item) => item.id === after) + 1;
    if (start === 0) throw errors.badRequest(`Invalid value for 'after': no input item with id '${after}' in this response.`, 'after');
  }
  const data = items.slice(start, start + limit);
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
    has_more: start + limit < items.length,
  };
}
