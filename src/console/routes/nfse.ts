import { Hono } from 'hono';
import type pg from 'pg';
import { withTransaction } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { getInvoice, listInvoices, reconcile, retryInvoice } from '../../nfse/store.ts';
import { redirect } from '../../web/http.ts';
import { audit } from '../audit.ts';
import { type CCtx, type ConsoleEnv, operatorOf } from '../http.ts';
import type { ConsoleRenderer } from '../render.ts';
import { nfsePage } from '../views/nfse.ts';

// Notas fiscais (issue 28): the notes that need the operator and the credited top-ups without an
// issued note (src/nfse/store.ts, what `catraca nfse list --missing` shows), and the retry after a
// fix — audited in its transaction; the portal's issuer then takes the row (it polls the table).

const log = createLogger('console');
const INVOICE_ID = '{inv_[0-9a-f]{32}}';
const DONE = ['issue', 'cancel'] as const;

export function nfseRoutes(db: pg.Pool, r: ConsoleRenderer): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  const show = async (c: CCtx, status: number, error?: string) => {
    const [problems, missing] = await Promise.all([listInvoices(db, { problems: true, limit: 200 }), reconcile(db, { problems: true, limit: 200 })]);
    const done = c.var.url.searchParams.get('done');
    const flash = !error && done && (DONE as readonly string[]).includes(done) ? c.var.t(`nfse.retried.${done as (typeof DONE)[number]}`) : null;
    return r.page(c, status, c.var.t('nfse.title'), (vc) => nfsePage(vc, { problems, missing }), { flash, error });
  };

  app.get('/nfse', (c) => show(c, 200));
  app.post(`/nfse/:id${INVOICE_ID}/retry`, async (c) => {
    const id = c.req.param('id');
    const operatorId = operatorOf(c).operator.id;
    const outcome = await withTransaction(db, async (tx) => {
      const before = await getInvoice(tx, id);
      if (!before) return 'unknown' as const;
      const what = await retryInvoice(tx, id);
      if (what !== 'nothing')
        await audit(tx, {
          operatorId,
          action: 'nfse_retry',
          ip: c.var.ip,
          tenantId: before.tenant_id,
          target: id,
          before: { state: before.state, cancel_state: before.cancel_state, error_code: before.error_code, error_message: before.error_message },
          after: { retry: what },
        });
      return what;
    });
    if (outcome === 'unknown') return r.notFound(c);
    if (outcome === 'nothing') return show(c, 409, c.var.t('nfse.retry_nothing'));
    log.info('console: nfse retry', { operator: operatorId, invoice_id: id, retry: outcome });
    return redirect(c, `/nfse?done=${outcome}`);
  });
  return app;
}
