import { Hono } from 'hono';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import { redirect, send } from '../../web/http.ts';
import { can } from '../authorize.ts';
import { type BatchFileKind, batchFile, cancelPortalBatch, getBatch, listBatches } from '../batches.ts';
import { type AppEnv, type Ctx, tenantOf } from '../http.ts';
import type { MessageKey } from '../i18n/index.ts';
import type { PageOptions, Renderer } from '../render.ts';
import { batchesPage, cancelConfirmPage } from '../views/batches.ts';

// "Lotes" (issue 30): every member sees the tenant's batches, their counts and spend; the files
// (the input, OpenAI's output and error files, Anthropic's results) hold prompts and answers, so
// only owners, admins and developers download them (roles.ts: `batches.results`) and cancel a batch
// still running (`batches.cancel`: a confirmation page, then the API's cancel). Another tenant's
// batch, a file not written or expired, or results of a batch still running: 404.

const log = createLogger('portal');

const BATCH_ID_PATTERN = '(?:msg)?batch_[0-9a-f]{24}';
const BATCH_ID = `{${BATCH_ID_PATTERN}}`;
const IS_BATCH_ID = new RegExp(`^${BATCH_ID_PATTERN}$`);

export function batchesRoutes(d: { db: pg.Pool }, r: Renderer): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const page = async (c: Ctx, status: number, o: PageOptions = {}) => {
    const p = Math.min(Math.max(1, Number.parseInt(c.var.url.searchParams.get('page') ?? '1', 10) || 1), 100000);
    const res = await listBatches(d.db, tenantOf(c), p);
    return r.page(c, status, c.var.t('batches.title'), (vc) => batchesPage(vc, res.rows, p, res.hasMore), o);
  };
  app.get('/batches', can('batches'), (c) => {
    const cancelled = c.var.url.searchParams.get('cancelled') ?? '';
    return page(c, 200, { flash: IS_BATCH_ID.test(cancelled) ? c.var.t('batches.cancelled_ok', { id: cancelled }) : null });
  });
  app.get(`/batches/:id${BATCH_ID}/:file{input|output|errors|results}`, can('batches.results'), async (c) => {
    const file = await batchFile(d.db, tenantOf(c), c.req.param('id'), c.req.param('file') as BatchFileKind);
    if (!file) return r.notFound(c);
    return send(c, 200, 'application/jsonl', new Uint8Array(file.content), {
      'content-disposition': `attachment; filename="${file.filename}"`,
      'cache-control': 'private, no-store',
    });
  });
  app.get(`/batches/:id${BATCH_ID}/cancel`, can('batches.cancel'), async (c) => {
    const b = await getBatch(d.db, tenantOf(c), c.req.param('id'));
    if (!b) return r.notFound(c);
    if (!b.cancellable) return notCancellable(c, b.id, b.status);
    return r.page(c, 200, c.var.t('batches.cancel_title', { id: b.id }), (vc) => cancelConfirmPage(vc, b));
  });
  app.post(`/batches/:id${BATCH_ID}/cancel`, can('batches.cancel'), async (c) => {
    const id = c.req.param('id');
    const res = await cancelPortalBatch(d.db, tenantOf(c), id);
    if (!res) return r.notFound(c);
    if ('notCancellable' in res) return notCancellable(c, id, res.notCancellable);
    log.info('batch cancelled from the portal', { tenant: tenantOf(c), batch_id: id, by: c.var.session!.user.id });
    return redirect(c, `/batches?cancelled=${id}`);
  });
  /** 409: the batch ended (or is being cancelled) meanwhile; the page says so. */
  const notCancellable = (c: Ctx, id: string, status: string) =>
    page(c, 409, { error: c.var.t('batches.not_cancellable', { id, status: c.var.t(`batches.status.${status}` as MessageKey) }) });
  return app;
}
