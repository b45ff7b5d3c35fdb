import { Hono } from 'hono';
import type pg from 'pg';
import { send } from '../../web/http.ts';
import { can } from '../authorize.ts';
import { type BatchFileKind, batchFile, listBatches } from '../batches.ts';
import { type AppEnv, tenantOf } from '../http.ts';
import type { Renderer } from '../render.ts';
import { batchesPage } from '../views/batches.ts';

// "Lotes" (issue 30): every member sees the tenant's batches, their counts and spend; the result
// files (OpenAI's output and error files, Anthropic's results) hold prompts and answers, so only
// owners, admins and developers download them (roles.ts: `batches.results`). Another tenant's
// batch, a file not written or expired, or results of a batch still running: 404.

const BATCH_ID = '{(?:msg)?batch_[0-9a-f]{24}}';

export function batchesRoutes(d: { db: pg.Pool }, r: Renderer): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.get('/batches', can('batches'), async (c) => {
    const p = Math.min(Math.max(1, Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1), 100000);
    const res = await listBatches(d.db, tenantOf(c), p);
    return r.page(c, 200, c.var.t('batches.title'), (vc) => batchesPage(vc, res.rows, p, res.hasMore));
  });
  app.get(`/batches/:id${BATCH_ID}/:file{output|errors|results}`, can('batches.results'), async (c) => {
    const file = await batchFile(d.db, tenantOf(c), c.req.param('id'), c.req.param('file') as BatchFileKind);
    if (!file) return r.notFound(c);
    return send(c, 200, 'application/jsonl', new Uint8Array(file.content), {
      'content-disposition': `attachment; filename="${file.filename}"`,
      'cache-control': 'private, no-store',
    });
  });
  return app;
}
