import { Hono } from 'hono';
import type { DbClient } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { parseUserAmount } from '../../pix/amount.ts';
import { currentProfile, documentLabel } from '../../nfse/profiles.ts';
import { qrDataUrl } from '../../pix/brcode.ts';
import { RecurringError, type RecurringService } from '../../pix/recurring/service.ts';
import { can } from '../authorize.ts';
import { type AppEnv, type Ctx, tenantOf } from '../http.ts';
import type { Renderer } from '../render.ts';
import { one, redirect } from '../../web/http.ts';
import { type RecurringForm, recurringPage } from '../views/recurring.ts';
import { profileFirst } from './topup.ts';
import type pg from 'pg';

// "Recarga automática" (owner and billing, like a top-up): GET shows it, POST creates the
// recurrence at the PSP, POST …/cancel cancels it (src/pix/recurring/service.ts). The payer's
// fields start from the tenant's "Dados fiscais" (src/nfse/profiles.ts) when it has them.

const log = createLogger('portal');

/** The payer's fields of a new form: the billing profile's document and name, when there is one. */
async function payerFromProfile(db: DbClient, tenantId: string): Promise<RecurringForm> {
  const p = await currentProfile(db, tenantId);
  return p ? { document: documentLabel(p), name: p.name } : {};
}

export function recurringRoutes(recurring: RecurringService | null, r: Renderer, fiscal: { db: pg.Pool; invoicing: boolean }): Hono<AppEnv> {
  const db = fiscal.db;
  const app = new Hono<AppEnv>();
  const show = async (c: Ctx, status: number, o: { form?: RecurringForm; error?: string } = {}) => {
    const tenantId = tenantOf(c);
    const rec = recurring ? await recurring.current(tenantId) : null;
    const charges = rec && recurring ? await recurring.charges(rec.id_rec) : [];
    const qr = rec?.status === 'CRIADA' && rec.br_code ? await qrDataUrl(rec.br_code) : null;
    const live = rec?.status === 'CRIADA' || rec?.status === 'APROVADA';
    const form = o.form ?? (recurring?.enabled && !live ? await payerFromProfile(db, tenantId) : undefined);
    return r.page(c, status, c.var.t('auto.title'), (vc) => recurringPage(vc, { enabled: !!recurring?.enabled, rec, charges, qr, form }), {
      error: o.error,
    });
  };
  app.get('/topup/auto', can('topup'), (c) => show(c, 200));
  app.post('/topup/auto', can('topup'), async (c) => {
    const f = c.var.form;
    const form: RecurringForm = {
      periodicity: one(f, 'periodicity'),
      target: one(f, 'target'),
      max: one(f, 'max'),
      document: one(f, 'document'),
      name: one(f, 'name'),
      first: one(f, 'first'),
      ispb: one(f, 'ispb'),
      agency: one(f, 'agency'),
      account: one(f, 'account'),
    };
    const t = c.var.t;
    if (!recurring?.enabled) return show(c, 404, { error: t('auto.off') });
    if (await profileFirst(fiscal, tenantOf(c))) return show(c, 409, { form, error: t('fiscal.required_topup') });
    const periodicity = form.periodicity === 'MENSAL' ? 'MENSAL' : form.periodicity === 'SEMANAL' ? 'SEMANAL' : null;
    const target = parseUserAmount(form.target ?? '');
    const max = parseUserAmount(form.max ?? '');
    const first = form.first?.trim() ? parseUserAmount(form.first) : undefined;
    if (!periodicity || target === null || target <= 0n) return show(c, 400, { form, error: t('auto.err.bad_target') });
    if (max === null) return show(c, 400, { form, error: t('auto.err.bad_max') });
    if (first === null) return show(c, 400, { form, error: t('auto.err.bad_first_amount') });
    try {
      await recurring.create(tenantOf(c), {
        periodicity,
        targetMicros: target,
        maxMicros: max,
        payerDocument: form.document ?? '',
        payerName: form.name ?? '',
        firstAmountMicros: first,
        // journey 1 when the payer's account is given: the request goes to their bank's app
        push: form.ispb?.trim() || form.account?.trim() ? { ispb: form.ispb ?? '', agency: form.agency, account: form.account ?? '' } : undefined,
      });
      return redirect(c, '/topup/auto');
    } catch (err) {
      if (err instanceof RecurringError && err.code !== 'psp_refused' && err.code !== 'not_configured')
        return show(c, err.code === 'live_exists' ? 409 : 400, { form, error: t(`auto.err.${err.code}` as never) });
      log.error('pix recurrence creation failed', { err, tenant: tenantOf(c) });
      return show(c, 502, { form, error: t('auto.err.psp') });
    }
  });
  app.post('/topup/auto/cancel', can('topup'), async (c) => {
    if (!recurring?.enabled) return show(c, 404, { error: c.var.t('auto.off') });
    try {
      await recurring.cancel(tenantOf(c));
      return redirect(c, '/topup/auto');
    } catch (err) {
      if (err instanceof RecurringError) return show(c, 409, { error: c.var.t('auto.err.not_live') });
      log.error('pix recurrence cancel failed', { err, tenant: tenantOf(c) });
      return show(c, 502, { error: c.var.t('auto.err.psp') });
    }
  });
  return app;
}
