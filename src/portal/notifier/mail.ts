import type pg from 'pg';
import { parseBrl } from '../../billing/money.ts';
import { createLogger } from '../../log.ts';
import type { Mail, Mailer } from '../../mail/index.ts';
import { qrPng } from '../../pix/brcode.ts';
import { type ChargeRow, type PixService, TopUpError } from '../../pix/service.ts';
import { amount, dateTime } from '../../web/format.ts';
import { escapeHtml } from '../../web/html.ts';
import { type MessageKey, translator } from '../i18n/index.ts';
import { type DeliveryRow, RECIPIENTS_SQL } from '../../notify/deliveries.ts';
import type { NotifyEvent } from '../../notify/events.ts';

// The notification e-mails, in pt-BR, to the tenant's owners and billing members with a verified
// address (one message to all of them). The low-balance one carries a ready Pix charge of the
// tenant's last top-up amount — its QR code inline (PNG, cid:pix-qr) and its copia e cola — made
// through PixService like the portal's top-up form (so within the open-charges cap), once per
// delivery (its txid is kept on the delivery: a retry sends the same charge). The e-mail of a
// recurring charge the payer's bank did not pay (topup.recurring_failed) carries one the same way,
// of that charge's amount: the tenant can top up at once instead of waiting for the retry.

const log = createLogger('notify');
const t = translator('pt-BR');
const LANG = 'pt-BR';
const QR_CID = 'pix-qr';

export interface MailDeps {
  db: pg.Pool;
  mailer: Mailer;
  /** null: no Pix (the low-balance e-mail then links to the top-up page only) */
  pix: PixService | null;
  /** the portal's public base URL */
  site: { url: string };
}

export type MailOutcome = { error: null } | { error: string; final: boolean };

/** Sends the e-mail of one event; `final` errors are not retried (nobody to send it to). */
export async function sendEventMail(m: MailDeps, d: DeliveryRow, e: NotifyEvent): Promise<MailOutcome> {
  const to = (await m.db.query(RECIPIENTS_SQL, [e.tenant_id])).rows.map((r) => r.email as string);
  if (to.length === 0) return { error: 'no owner or billing member with a verified e-mail', final: true };
  if (!m.mailer.configured) return { error: 'SMTP_URL is not set', final: false };
  const tenant = ((await m.db.query('select name from tenants where id = $1', [e.tenant_id])).rows[0]?.name as string | undefined) ?? e.tenant_id;
  const charge =
    e.type === 'balance.low'
      ? await offeredCharge(m, d, e.tenant_id, () => lastTopUpAmount(m.db, e.tenant_id))
      : e.type === 'topup.recurring_failed'
        ? await offeredCharge(m, d, e.tenant_id, async () => parseBrl(String(e.data.amount ?? '0')) || null)
        : null;
  const invoice = e.type === 'topup.credited' ? await topUpInvoice(m.db, String(e.data.charge_id ?? '')) : null;
  try {
    await m.mailer.sendMail(await composeMail(m.site.url, to, tenant, e, charge, invoice));
    return { error: null };
  } catch (err) {
    return { error: `SMTP: ${(err as Error).message}`.slice(0, 300), final: false };
  }
}

/** The nota fiscal of a top-up as it is when its e-mail is sent. */
export type TopUpInvoice = { state: string; access_key: string | null; nfse_number: string | null };

/** The top-up's note, or null when none is made for it (NFS-e issuing off, or monthly notes). */
async function topUpInvoice(db: pg.Pool, txid: string): Promise<TopUpInvoice | null> {
  const { rows } = await db.query('select state, access_key, nfse_number from invoices where pix_txid = $1', [txid]);
  return rows[0] ?? null;
}

/** The amount of the tenant's last paid top-up (null: it never paid one). */
async function lastTopUpAmount(db: pg.Pool, tenantId: string): Promise<bigint | null> {
  const { rows } = await db.query(
    `select amount_micros from pix_charges where tenant_id = $1 and status = 'CONCLUIDA' and id_rec is null order by paid_at desc nulls last, created_at desc limit 1`,
    [tenantId],
  );
  return rows[0]?.amount_micros ?? null;
}

/** The delivery's Pix charge: the one made for it before (a retry), else a new one of `amountOf()`; null when none can be offered. */
async function offeredCharge(m: MailDeps, d: DeliveryRow, tenantId: string, amountOf: () => Promise<bigint | null>): Promise<ChargeRow | null> {
  if (!m.pix) return null;
  if (d.pix_txid) {
    const ch = await m.pix.getCharge(d.pix_txid, tenantId);
    return ch && ch.status === 'ATIVA' && ch.expires_at.getTime() > Date.now() ? ch : null;
  }
  const micros = await amountOf();
  if (micros === null) return null;
  try {
    const ch = await m.pix.createTopUp(tenantId, micros);
    await m.db.query('update notify_deliveries set pix_txid = $2 where id = $1', [d.id, ch.txid]);
    return ch;
  } catch (err) {
    if (err instanceof TopUpError) log.info('notification e-mail without a Pix charge', { tenant_id: tenantId, reason: err.code });
    else log.warn('notification e-mail without a Pix charge: the PSP failed', { tenant_id: tenantId, err: err as Error });
    return null;
  }
}

const brl = (v: unknown) => amount(LANG, parseBrl(String(v ?? '0')));
const when = (v: unknown) => dateTime(LANG, new Date(String(v)));
const keyName = (data: Record<string, unknown>) => (data.key_label ? `“${data.key_label}” (${data.key_hint})` : String(data.key_hint ?? data.key_id));

/** The subject's and the body's variables of an event. */
function eventVars(tenant: string, e: NotifyEvent): Record<string, string> {
  const d = e.data;
  const window = t(`notify.mail.window.${(d.limit_reset as string | null) ?? 'total'}` as MessageKey);
  return {
    tenant,
    balance: brl(d.balance),
    threshold: brl(d.threshold),
    amount: brl(d.amount),
    key: keyName(d),
    spent: brl(d.spent),
    limit: brl(d.limit),
    window,
    date: when(d.revoked_at ?? d.expires_at ?? e.created_at),
    number: String(d.number ?? ''),
    access_key: String(d.access_key ?? ''),
  };
}

/**
 * What a topup.credited e-mail says of the top-up's nota fiscal: its number and access key when it
 * was issued before the e-mail left, else that it is on its way (the key then comes in the
 * invoice.issued notice and on the Notas fiscais page); nothing when no note is made for it.
 */
function invoiceLine(base: string, e: NotifyEvent, invoice: TopUpInvoice | null): string | null {
  if (e.type !== 'topup.credited' || !invoice) return null;
  const link = `${base}/notas-fiscais`;
  const key = (e.data.access_key as string | null | undefined) ?? invoice.access_key;
  if (invoice.state === 'issued' && key) return t('notify.mail.invoice_issued', { number: invoice.nfse_number ?? '', access_key: key, link });
  return t('notify.mail.invoice_pending', { link });
}

export async function composeMail(
  site: string,
  to: string[],
  tenant: string,
  e: NotifyEvent,
  charge: ChargeRow | null,
  invoice: TopUpInvoice | null = null,
): Promise<Mail> {
  const base = site.replace(/\/+$/, '');
  const vars = eventVars(tenant, e);
  const subject = t(`notify.mail.subject.${e.type}` as MessageKey, vars);
  const body = t(`notify.mail.body.${e.type}` as MessageKey, vars);
  const footer = t('notify.mail.footer', { tenant, link: `${base}/notifications` });
  const topup = e.type.startsWith('balance.') || e.type === 'topup.recurring_failed' ? t('notify.mail.topup_link', { link: `${base}/topup` }) : null;
  const text: string[] = [body];
  const html: string[] = [`<p>${escapeHtml(body)}</p>`];
  const attachments: Mail['attachments'] = [];
  if (charge) {
    const intro = t('notify.mail.pix_intro', { amount: amount(LANG, charge.amount_micros), expires: dateTime(LANG, charge.expires_at) });
    text.push(intro, t('notify.mail.pix_copy'), charge.br_code);
    html.push(
      `<p>${escapeHtml(intro)}</p>`,
      `<p><img src="cid:${QR_CID}" alt="QR code Pix" width="280" height="280"></p>`,
      `<p>${escapeHtml(t('notify.mail.pix_copy'))}</p><pre style="white-space:pre-wrap;word-break:break-all">${escapeHtml(charge.br_code)}</pre>`,
    );
    attachments.push({ filename: 'pix.png', content: await qrPng(charge.br_code), contentType: 'image/png', cid: QR_CID });
  }
  const note = invoiceLine(base, e, invoice);
  if (note) {
    text.push(note);
    html.push(`<p>${escapeHtml(note)}</p>`);
  }
  if (topup) {
    text.push(topup);
    html.push(`<p>${escapeHtml(topup)}</p>`);
  }
  text.push(footer);
  html.push(`<p style="color:#666">${escapeHtml(footer)}</p>`);
  return { to, subject, text: text.join('\n\n'), html: html.join('\n'), attachments };
}
