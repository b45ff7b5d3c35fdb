import { Hono } from 'hono';
import type pg from 'pg';
import { getTenant } from '../../db/tenants.ts';
import { createLogger } from '../../log.ts';
import { parseUserAmountInput } from '../../pix/amount.ts';
import { qrDataUrl } from '../../pix/brcode.ts';
import { CENTAVO_MICROS, MAX_OPEN_CHARGES, TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../../pix/limits.ts';
import { type PixService, TopUpError } from '../../pix/service.ts';
import { type MailContext, sendVerification } from '../emails.ts';
import { money } from '../../web/format.ts';
import { type AppEnv, type Ctx, tenantOf } from '../http.ts';
import { json, one, redirect } from '../../web/http.ts';
import type { Renderer } from '../render.ts';
import { can } from '../authorize.ts';
import { chargePage, topupPage, verifyFirstPage } from '../views/topup.ts';
import { hasProfile } from '../../nfse/store.ts';

// Top-ups by Pix: the charges list and form, a charge's page (QR, copia e cola) and its status poll.

const log = createLogger('portal');
/** A charge's txid in a path. */
export const TXID = '{[a-zA-Z0-9]{26,35}}';

export interface TopUpDeps extends MailContext {
  db: pg.Pool;
  pix: PixService;
  /** Shows the simulator's pay button on a charge page (routes/dev.ts). */
  devMode: boolean;
  /** NFS-e issuing is on: no top-up before the tenant's "Dados fiscais" (the note is issued to them). */
  invoicing: boolean;
}

/** Whether a top-up must wait for the tenant's billing profile: issuing is on and the tenant has none. */
export async function profileFirst(d: { db: pg.Pool; invoicing: boolean }, tenantId: string): Promise<boolean> {
  return d.invoicing && !(await hasProfile(d.db, tenantId));
}

export function topUpRoutes(d: TopUpDeps, r: Renderer): Hono<AppEnv> {
  const { db, pix } = d;
  const app = new Hono<AppEnv>();
  // Until the address is verified, no Pix charge: the page says why and offers the link again.
  const verifyFirst = (c: Ctx, status: number, o: { flash?: string; error?: string } = {}) =>
    r.page(c, status, c.var.t('topup.title'), (vc) => verifyFirstPage(vc, { email: c.var.session!.user.email, mailConfigured: d.mailer.configured }), o);
  const verified = (c: Ctx) => c.var.session!.user.email_verified_at !== null;
  app.get('/topup', can('topup'), async (c) => {
    if (!verified(c))
      return verifyFirst(c, 200, { flash: c.var.url.searchParams.has('sent') ? c.var.t('topup.resent', { email: c.var.session!.user.email }) : undefined });
    const charges = await pix.listCharges(tenantOf(c));
    const needsProfile = await profileFirst(d, tenantOf(c));
    return r.page(c, 200, c.var.t('topup.title'), (vc) => topupPage(vc, charges, { profileFirst: needsProfile }));
  });
  app.post('/topup', can('topup'), async (c) => {
    if (!verified(c)) return verifyFirst(c, 403, { error: c.var.t('topup.verify_first_title') });
    // the note of this top-up would be issued to nobody: Dados fiscais first
    if (await profileFirst(d, tenantOf(c))) {
      const charges = await pix.listCharges(tenantOf(c));
      return r.page(c, 409, c.var.t('topup.title'), (vc) => topupPage(vc, charges, { profileFirst: true }), { error: c.var.t('fiscal.required_topup') });
    }
    return createTopUp(c, pix, r);
  });
  app.post('/verify/resend', can('account'), async (c) => {
    if (verified(c)) return redirect(c, '/topup');
    if (!d.mailer.configured) return verifyFirst(c, 503);
    if (!(await sendVerification(d, c.var.t, c.var.session!.user))) return verifyFirst(c, 429, { error: c.var.t('topup.resend_limited') });
    return redirect(c, '/topup?sent=1');
  });
  app.get(`/topup/:txid${TXID}`, can('topup'), async (c) => {
    const tenantId = tenantOf(c);
    const ch = await pix.getCharge(c.req.param('txid'), tenantId);
    if (!ch) return r.notFound(c);
    const qr = await qrDataUrl(ch.br_code);
    const balance = (await getTenant(db, tenantId))?.balance_micros ?? 0n;
    return r.page(c, 200, c.var.t('topup.title'), (vc) => chargePage(vc, ch, qr, { devMode: d.devMode, balance }));
  });
  app.get(`/topup/:txid${TXID}/status`, can('topup'), (c) => chargeStatus(c, c.req.param('txid'), db, pix));
  return app;
}

/** The message for a refused amount: thousands separators get their own (see src/billing/amount-input.ts). */
function amountError(c: Ctx, res: ReturnType<typeof parseUserAmountInput>, text: string): string {
  if (!res.ok && (res.error === 'thousands_separator' || res.error === 'ambiguous')) return c.var.t('amount.no_thousands', { value: text.trim().slice(0, 40) });
  return c.var.t('topup.bad_amount');
}

async function createTopUp(c: Ctx, pix: PixService, r: Renderer) {
  const { t, lang, form } = c.var;
  const tenantId = tenantOf(c);
  const amountText = one(form, 'amount');
  const parsed = parseUserAmountInput(amountText);
  const fail = (status: number, error: string) => r.page(c, status, t('topup.title'), (vc) => topupPage(vc, [], { amount: amountText }), { error });
  if (!parsed.ok || parsed.micros % CENTAVO_MICROS !== 0n) return fail(400, amountError(c, parsed, amountText));
  try {
    const ch = await pix.createTopUp(tenantId, parsed.micros);
    return redirect(c, `/topup/${ch.txid}`);
  } catch (err) {
    if (err instanceof TopUpError && err.code === 'too_many_open') return fail(429, t('topup.too_many_open', { max: MAX_OPEN_CHARGES }));
    const lim = { min: money(lang, TOPUP_MIN_MICROS), max: money(lang, TOPUP_MAX_MICROS) };
    if (err instanceof TopUpError)
      return fail(400, err.code === 'below_min' ? t('topup.below_min', lim) : err.code === 'above_max' ? t('topup.above_max', lim) : t('topup.bad_amount'));
    log.error('pix charge creation failed', { err, tenant: tenantId });
    return fail(502, t('topup.psp_error'));
  }
}

async function chargeStatus(c: Ctx, txid: string, db: pg.Pool, pix: PixService) {
  const tenantId = tenantOf(c);
  let ch = await pix.getCharge(txid, tenantId);
  if (!ch) return json(c, 404, { error: 'not found' });
  if (ch.status === 'ATIVA' && ch.expires_at.getTime() < Date.now()) {
    await pix.reconcileCharge(txid).catch((err) => log.warn('reconcile on view failed', { err, txid }));
    ch = (await pix.getCharge(txid, tenantId))!;
  }
  const balance = (await getTenant(db, tenantId))?.balance_micros ?? 0n;
  return json(c, 200, {
    txid: ch.txid,
    status: ch.status,
    amount: ch.amount_micros.toString(),
    expires_at: ch.expires_at.toISOString(),
    paid_at: ch.paid_at?.toISOString() ?? null,
    balance_micros: balance.toString(),
    balance_display: money(c.var.lang, balance),
  });
}
