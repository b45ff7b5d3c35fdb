import { Hono } from 'hono';
import type pg from 'pg';
import { createLogger } from '../../log.ts';
import { renderDanfse } from '../../nfse/danfse.ts';
import { type ProfileInput, profileHistory, saveProfile } from '../../nfse/profiles.ts';
import { listInvoices, tenantInvoice } from '../../nfse/store.ts';
import { one, redirect, send } from '../../web/http.ts';
import { can } from '../authorize.ts';
import { type AppEnv, type Ctx, tenantOf } from '../http.ts';
import type { Renderer } from '../render.ts';
import { FORM_NAMES, fiscalPage, invoicesPage, profileForm } from '../views/invoices.ts';

// "Dados fiscais" (owner and billing): the billing profile, checked on the server
// (src/nfse/profiles.ts) and saved as a new version each time. "Notas fiscais" (owner and
// billing): the tenant's notes, each NFS-e's XML byte for byte as Sefin returned it, and the
// DANFSe PDF rendered here from it (src/nfse/danfse.ts). Every query is scoped by the session's
// tenant: another tenant's note id is a 404.

const log = createLogger('portal');
const INVOICE_ID = '{inv_[0-9a-f]{32}}';

export interface InvoiceRoutesDeps {
  db: pg.Pool;
  /** NFS-e issuing is on (NFSE_PROVIDER): the Notas fiscais page says so when it is off */
  invoicing: boolean;
}

export function invoiceRoutes(d: InvoiceRoutesDeps, r: Renderer): Hono<AppEnv> {
  const { db } = d;
  const app = new Hono<AppEnv>();

  const fiscal = async (c: Ctx, status: number, o: { form?: Partial<ProfileInput>; errors?: Record<string, string>; error?: string } = {}) => {
    const history = await profileHistory(db, tenantOf(c), 20);
    const form = o.form ?? (history[0] ? profileForm(history[0]) : {});
    const flash = c.var.url.searchParams.has('saved') && !o.error ? c.var.t('fiscal.saved') : null;
    return r.page(c, status, c.var.t('fiscal.title'), (vc) => fiscalPage(vc, { form, errors: o.errors ?? {}, history }), { flash, error: o.error });
  };

  app.get('/dados-fiscais', can('invoices'), (c) => fiscal(c, 200));
  app.post('/dados-fiscais', can('invoices'), async (c) => {
    const f = c.var.form;
    const input = Object.fromEntries(Object.entries(FORM_NAMES).map(([key, name]) => [key, one(f, name).slice(0, 400)])) as unknown as ProfileInput;
    const saved = await saveProfile(db, tenantOf(c), input, c.var.session!.user.id);
    if (!saved.ok) {
      // the document's own message when it is the document that is wrong (it names it)
      const error = saved.errors.document ?? c.var.t('fiscal.fix');
      return fiscal(c, 400, { form: input, errors: saved.errors, error });
    }
    log.info('billing profile saved', { tenant: tenantOf(c), user: c.var.session!.user.id, profile_id: saved.profile.id, kind: saved.profile.document_kind });
    return redirect(c, '/dados-fiscais?saved=1');
  });

  app.get('/notas-fiscais', can('invoices'), async (c) => {
    const invoices = await listInvoices(db, { tenantId: tenantOf(c), limit: 500 });
    return r.page(c, 200, c.var.t('invoices.title'), (vc) => invoicesPage(vc, { invoices, issuing: d.invoicing }));
  });
  app.get(`/notas-fiscais/:id${INVOICE_ID}/xml`, can('invoices'), async (c) => {
    const inv = await tenantInvoice(db, tenantOf(c), c.req.param('id'));
    if (!inv?.nfse_xml || inv.state !== 'issued') return r.notFound(c);
    // byte for byte the NFS-e Sefin returned
    return send(c, 200, 'application/xml', new Uint8Array(inv.nfse_xml), {
      'content-disposition': `attachment; filename="NFSe-${inv.access_key}.xml"`,
      'cache-control': 'private, no-store',
    });
  });
  app.get(`/notas-fiscais/:id${INVOICE_ID}/pdf`, can('invoices'), async (c) => {
    const inv = await tenantInvoice(db, tenantOf(c), c.req.param('id'));
    if (!inv?.nfse_xml || inv.state !== 'issued') return r.notFound(c);
    const pdf = await renderDanfse(inv.nfse_xml.toString('utf8'), { cancelled: inv.cancel_state === 'done' });
    return send(c, 200, 'application/pdf', new Uint8Array(pdf), {
      'content-disposition': `attachment; filename="DANFSe-${inv.access_key}.pdf"`,
      'cache-control': 'private, no-store',
    });
  });
  return app;
}
