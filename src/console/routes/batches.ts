import { Hono } from 'hono';
import type pg from 'pg';
import { BATCH_STATUSES, listAllBatches } from '../batches.ts';
import type { CCtx, ConsoleEnv } from '../http.ts';
import type { ConsoleRenderer } from '../render.ts';
import { batchesPage } from '../views/batches.ts';

// "Lotes": every tenant's batches, newest first, filtered by status and tenant (read only).

const page = (c: CCtx) => Math.min(Math.max(Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1, 1), 10_000);

export function batchRoutes(db: pg.Pool, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  app.get('/batches', async (c) => {
    const q = c.var.url.searchParams;
    const asked = q.get('status') ?? '';
    const status = (BATCH_STATUSES as readonly string[]).includes(asked) ? asked : '';
    const tenantId = (q.get('tenant') ?? '').trim().slice(0, 100);
    const list = await listAllBatches(db, { status: status || undefined, tenantId: tenantId || undefined }, page(c));
    return r.page(c, 200, c.var.t('batches.title'), (vc) => batchesPage(vc, { status, tenantId, rows: list.rows, page: page(c), hasMore: list.hasMore }));
  });
  return app;
}
