import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { withTransaction, type DbClient } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { DEFAULT_CHARGE_EXPIRY_S, MAX_OPEN_CHARGES, TOPUP_MAX_MICROS, TOPUP_MIN_MICROS, CENTAVO_MICROS } from './limits.ts';
import type { ChargeStatus, PixCharge, PixPayment, PixRefund, PspAdapter, WebhookRequest } from './types.ts';
import { type NotifyEvent, topUpEvent } from '../notify/events.ts';
import { cancelForRefund, invoiceForTopUp } from '../nfse/store.ts';

/** Every txid we create (BCB API Pix: 26–35 alphanumerics); anything else cannot be a charge of ours. */
const OUR_TXID = /^[a-zA-Z0-9]{26,35}$/;

/**
 * Text from a webhook as the audit table can keep it: PostgreSQL text cannot hold NUL (the insert
 * would fail and the notice answer 500), and a notice's fields are attacker-chosen, so each is cut
 * to 200 characters.
 */
export function auditText(v: string | null | undefined): string | null {
  if (v === null || v === undefined) return null;
  const clean = v.replaceAll('\u0000', '\uFFFD');
  return clean.length > 200 ? `${clean.slice(0, 199)}…` : clean;
}

const log = createLogger('pix');

export interface ChargeRow {
  txid: string;
  tenant_id: string;
  amount_micros: bigint;
  status: ChargeStatus;
  provider: string;
  br_code: string;
  location: string | null;
  expires_at: Date;
  end_to_end_id: string | null;
  created_at: Date;
  paid_at: Date | null;
}

export type PaymentOutcome =
  | 'credited'
  | 'duplicate'
  | 'no_txid'
  | 'unknown_txid'
  | 'amount_mismatch'
  | 'already_paid_other_e2e'
  | 'charge_removed'
  /** A webhook's payment that the PSP's GET /cob does not show (forged, or not settled): nothing credited. */
  | 'not_confirmed'
  /** The PSP could not be asked; the webhook is answered 503 so the PSP delivers it again. */
  | 'psp_unavailable';

export type RefundOutcome = 'refunded' | 'shortfall' | 'duplicate' | 'pending' | 'not_done' | 'unknown_payment' | 'exceeds_payment';

export class TopUpError extends Error {
  constructor(readonly code: 'below_min' | 'above_max' | 'not_centavos' | 'too_many_open') {
    super(code);
  }
}

/** What applying a payment came to, in its transaction. */
type Applied = { outcome: PaymentOutcome; detail?: string; tenant?: string; balance?: bigint; events?: NotifyEvent[]; invoice?: string | null };

/** Advisory lock namespace of a tenant's top-ups (second key: hashtext(tenant id)). */
const LOCK_TOPUP_TENANT = 7261104;

/** txid of a new charge: 32 characters of [a-f0-9] (the API Pix allows [a-zA-Z0-9]{26,35}). */
export function newTxid(): string {
  return randomBytes(16).toString('hex');
}

/**
 * Pix top-ups: charges at the PSP, webhook intake, reconciliation, refunds. Every credit goes
 * through catraca_pix_credit (catraca_credit with external_id = endToEndId: exactly once, same
 * ledger as debits).
 */
export class PixService {
  private timer: NodeJS.Timeout | null = null;
  private reconciling: Promise<unknown> | null = null;

  constructor(
    private readonly db: pg.Pool,
    readonly psp: PspAdapter,
    private readonly opts: {
      expiresInS?: number;
      maxOpenCharges?: number;
      /** After a credit or refund committed: the tenant and the events made with it (topup.credited); src/notify publishes them and checks the balance. */
      notify?: (tenantId: string, events: NotifyEvent[]) => Promise<unknown>;
      /** After a credit or refund committed that made a nota fiscal to issue or cancel (src/nfse): the issuer publishes it. */
      invoices?: () => void;
    } = {},
  ) {}

  async createTopUp(tenantId: string, amountMicros: bigint): Promise<ChargeRow> {
    if (amountMicros % CENTAVO_MICROS !== 0n) throw new TopUpError('not_centavos');
    if (amountMicros < TOPUP_MIN_MICROS) throw new TopUpError('below_min');
    if (amountMicros > TOPUP_MAX_MICROS) throw new TopUpError('above_max');
    const maxOpen = this.opts.maxOpenCharges ?? MAX_OPEN_CHARGES;
    // Count and create under a per-tenant advisory lock (never the tenant row: admissions lock
    // it), so parallel top-ups cannot pass the cap together. The PSP call happens inside: it is
    // one tenant's top-up form, not a hot path.
    const row = await withTransaction(this.db, async (c) => {
      await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_TOPUP_TENANT, tenantId]);
      const { rows: open } = await c.query(
        `select count(*)::int as n from pix_charges where tenant_id = $1 and status = 'ATIVA' and expires_at > now() and id_rec is null`,
        [tenantId],
      );
      if (open[0].n >= maxOpen) throw new TopUpError('too_many_open');
      const txid = newTxid();
      const expiresInS = this.opts.expiresInS ?? DEFAULT_CHARGE_EXPIRY_S;
      const cob = await this.psp.createCharge({ txid, amountMicros, expiresInS, description: 'Créditos catraca' });
      const expiresAt = new Date(cob.createdAt.getTime() + cob.expiresInS * 1000);
      const { rows } = await c.query(
        `insert into pix_charges (txid, tenant_id, amount_micros, status, provider, br_code, location, expires_at)
         values ($1, $2, $3, 'ATIVA', $4, $5, $6, $7) returning *`,
        [txid, tenantId, amountMicros, this.psp.name, cob.brCode, cob.location, expiresAt],
      );
      return rows[0] as ChargeRow;
    });
    log.info('pix charge created', { txid: row.txid, tenant: tenantId, amount_micros: String(amountMicros), provider: this.psp.name });
    return row;
  }

  /** A charge of this tenant only (IDOR: another tenant's txid is "not found"). */
  async getCharge(txid: string, tenantId: string): Promise<ChargeRow | null> {
    // one-off charges only: a recurring one has no QR (its page is the recurrence's)
    const { rows } = await this.db.query('select * from pix_charges where txid = $1 and tenant_id = $2 and id_rec is null', [txid, tenantId]);
    return rows[0] ?? null;
  }

  async listCharges(tenantId: string, limit = 20): Promise<ChargeRow[]> {
    const { rows } = await this.db.query('select * from pix_charges where tenant_id = $1 and id_rec is null order by created_at desc limit $2', [
      tenantId,
      limit,
    ]);
    return rows;
  }

  private async audit(db: DbClient, e: { outcome: string; txid?: string | null; e2e?: string | null; detail?: string | null; remote?: string | null }) {
    await db.query('insert into pix_webhook_events (outcome, txid, end_to_end_id, detail, remote_addr) values ($1,$2,$3,$4,$5)', [
      e.outcome,
      auditText(e.txid),
      auditText(e.e2e),
      auditText(e.detail),
      auditText(e.remote),
    ]);
  }

  /**
   * Webhook intake. 401 for a bad secret (not audited: see the route), 400 for a malformed body, 503 when the PSP could not be
   * asked (the PSP delivers again; reconciliation also finds the payment), otherwise 200 (each
   * item's outcome audited and logged). A callback is only a notice: see confirmNotice().
   */
  async handleWebhook(req: WebhookRequest & { remoteAddr?: string }): Promise<{ status: number; body: unknown; rejected?: 'bad_secret' }> {
    const v = this.psp.verifyWebhook(req);
    // A wrong secret is anyone at all: never stored (the caller counts, limits and logs it). A bad
    // body came with the secret: the PSP, or whoever has its secret, and is audited.
    if (!v.ok && v.reason === 'bad_secret') return { status: 401, body: { error: 'unauthorized' }, rejected: 'bad_secret' };
    if (!v.ok) {
      log.warn('pix webhook rejected', { reason: v.reason, detail: v.detail, remote: req.remoteAddr });
      await this.audit(this.db, { outcome: `rejected_${v.reason}`, detail: v.detail ?? null, remote: req.remoteAddr });
      return { status: 400, body: { error: 'bad request' } };
    }
    const results = [];
    for (const p of v.payments) {
      results.push({ endToEndId: p.endToEndId, outcome: await this.confirmNotice(p, req.remoteAddr) });
    }
    if (results.some((r) => r.outcome === 'psp_unavailable')) return { status: 503, body: { error: 'psp unavailable, deliver again' } };
    return { status: 200, body: { received: results.length } };
  }

  /**
   * One item of a webhook callback. It says a Pix arrived; only the PSP's own record says so with
   * authority. Cheap local checks first (unknown txid, amount not the charge's, a redelivery of
   * the payment already credited), then GET /cob/{txid}: the credit happens only when the PSP
   * reports the charge CONCLUIDA with a pix[] entry of this endToEndId for exactly the charge's
   * amount — and it is that entry (with the PSP's devoluções, not the callback's) that is applied.
   */
  async confirmNotice(p: PixPayment, remote?: string): Promise<PaymentOutcome> {
    const done = async (outcome: PaymentOutcome, detail?: string, tenant?: string) => {
      const fields = { via: 'webhook', txid: auditText(p.txid), e2e: p.endToEndId, tenant, detail, remote };
      if (outcome === 'duplicate') log.info('pix duplicate ignored', fields);
      else log.warn('pix webhook not credited', { ...fields, outcome });
      await this.audit(this.db, { outcome, txid: p.txid, e2e: p.endToEndId, detail: ['webhook', detail].filter(Boolean).join(': '), remote });
      return outcome;
    };
    if (!p.txid) return done('no_txid');
    if (!OUR_TXID.test(p.txid)) return done('unknown_txid');
    const { rows } = await this.db.query('select * from pix_charges where txid = $1', [p.txid]);
    const ch = rows[0] as ChargeRow | undefined;
    if (!ch) return done('unknown_txid');
    if (p.amountMicros !== ch.amount_micros) return done('amount_mismatch', `expected ${ch.amount_micros} got ${p.amountMicros} micro-BRL`, ch.tenant_id);
    if (ch.status === 'CONCLUIDA' && ch.end_to_end_id === p.endToEndId && p.devolucoes.length === 0) return done('duplicate', undefined, ch.tenant_id);
    let cob: PixCharge | null;
    try {
      cob = await this.psp.getCharge(p.txid);
    } catch (err) {
      log.warn('pix webhook: the PSP could not confirm the payment', { err, txid: p.txid });
      return done('psp_unavailable', (err as Error).message.slice(0, 200), ch.tenant_id);
    }
    const paid = cob?.status === 'CONCLUIDA' && cob.txid === p.txid ? cob.pix.find((x) => x.endToEndId === p.endToEndId) : undefined;
    if (!cob || !paid || cob.amountMicros !== ch.amount_micros || paid.amountMicros !== ch.amount_micros) {
      const why = !cob
        ? 'the PSP does not know the charge'
        : cob.status !== 'CONCLUIDA'
          ? `PSP status ${cob.status}`
          : !paid
            ? 'the PSP has no Pix with this endToEndId for the charge'
            : `the PSP reports valor ${paid.valor}`;
      return done('not_confirmed', why, ch.tenant_id);
    }
    return this.applyPayment({ ...paid, txid: p.txid }, 'webhook', remote);
  }

  /** Applies one received Pix (from a webhook or from reconciliation), then its devoluções. */
  async applyPayment(p: PixPayment, via: 'webhook' | 'reconcile', remote?: string): Promise<PaymentOutcome> {
    const outcome = await withTransaction(this.db, async (c): Promise<Applied> => {
      if (!p.txid) return { outcome: 'no_txid' };
      const { rows } = await c.query('select * from pix_charges where txid = $1 for update', [p.txid]);
      const ch = rows[0] as ChargeRow | undefined;
      if (!ch) return { outcome: 'unknown_txid' };
      if (p.amountMicros !== ch.amount_micros)
        return { outcome: 'amount_mismatch', detail: `expected ${ch.amount_micros} got ${p.amountMicros} micro-BRL`, tenant: ch.tenant_id };
      if (ch.status === 'CONCLUIDA') {
        return ch.end_to_end_id === p.endToEndId ? { outcome: 'duplicate', tenant: ch.tenant_id } : { outcome: 'already_paid_other_e2e', tenant: ch.tenant_id };
      }
      if (ch.status !== 'ATIVA' && ch.status !== 'EXPIRADA') return { outcome: 'charge_removed', detail: ch.status, tenant: ch.tenant_id };
      const paidAt = Number.isNaN(Date.parse(p.horario)) ? new Date() : new Date(p.horario);
      // marks the charge paid and credits its amount to its tenant, once (the portal's role may not call catraca_credit)
      const { rows: paid } = await c.query('select * from catraca_pix_credit($1, $2, $3)', [p.txid, p.endToEndId, paidAt]);
      const r = paid[0] as { status: string; balance: bigint };
      const invoice = r.status === 'credited' ? await invoiceForTopUp(c, p.txid) : null;
      return {
        outcome: r.status === 'credited' ? 'credited' : 'duplicate',
        tenant: ch.tenant_id,
        balance: r.balance,
        detail: ch.status === 'EXPIRADA' ? 'paid after local expiry' : undefined,
        // the nota fiscal to issue (when NFS-e issuing is on, per top-up), made first: topup.credited names it
        invoice,
        // topup.credited, in the credit's transaction: the event exists exactly when the credit does
        events: r.status === 'credited' ? await topUpEvent(c, p.txid) : [],
      };
    });
    if (outcome.invoice) this.opts.invoices?.();
    if (outcome.outcome === 'credited' && outcome.tenant) await this.opts.notify?.(outcome.tenant, outcome.events ?? []);
    const fields = { via, txid: p.txid, e2e: p.endToEndId, tenant: outcome.tenant, detail: outcome.detail, remote };
    if (outcome.outcome === 'credited') log.info('pix credited', { ...fields, balance_micros: String(outcome.balance) });
    else if (outcome.outcome === 'duplicate') log.info('pix duplicate ignored', fields);
    else if (outcome.outcome === 'already_paid_other_e2e' || outcome.outcome === 'charge_removed')
      log.error('pix received for a charge that cannot take it: refund manually', { ...fields, outcome: outcome.outcome });
    else log.warn('pix payment not credited', { ...fields, outcome: outcome.outcome });
    await this.audit(this.db, { outcome: outcome.outcome, txid: p.txid, e2e: p.endToEndId, detail: [via, outcome.detail].filter(Boolean).join(': '), remote });
    for (const d of p.devolucoes) await this.applyRefund(p.endToEndId, d, via);
    return outcome.outcome;
  }

  /** A devolução seen in a callback or in GET /cob: debits exactly once when DEVOLVIDO. */
  async applyRefund(endToEndId: string, d: PixRefund, via: 'webhook' | 'reconcile' | 'request'): Promise<RefundOutcome> {
    const r = await withTransaction(
      this.db,
      async (c): Promise<{ outcome: RefundOutcome; txid?: string; tenant?: string; debited?: bigint; cancel?: string | null }> => {
        const { rows } = await c.query('select * from pix_charges where end_to_end_id = $1 for update', [endToEndId]);
        const ch = rows[0] as ChargeRow | undefined;
        if (!ch) return { outcome: 'unknown_payment' };
        const { rows: prev } = await c.query(
          `select coalesce(sum(amount_micros), 0)::bigint as total from pix_refunds
          where end_to_end_id = $1 and refund_id <> $2 and status <> 'NAO_REALIZADO'`,
          [endToEndId, d.id],
        );
        if (prev[0].total + d.amountMicros > ch.amount_micros) return { outcome: 'exceeds_payment', txid: ch.txid, tenant: ch.tenant_id };
        const { rows: ex } = await c.query(
          `insert into pix_refunds (end_to_end_id, refund_id, txid, tenant_id, amount_micros, status) values ($1,$2,$3,$4,$5,$6)
         on conflict (end_to_end_id, refund_id) do update set status = excluded.status returning debited_micros`,
          [endToEndId, d.id, ch.txid, ch.tenant_id, d.amountMicros, d.status],
        );
        if (d.status === 'EM_PROCESSAMENTO') return { outcome: 'pending', txid: ch.txid, tenant: ch.tenant_id };
        if (d.status === 'NAO_REALIZADO') return { outcome: 'not_done', txid: ch.txid, tenant: ch.tenant_id };
        const { rows: res } = await c.query('select * from catraca_pix_refund($1, $2, $3, $4)', [
          ch.tenant_id,
          d.amountMicros,
          `pix_refund:${endToEndId}:${d.id}`,
          `devolução ${d.id} of ${ch.txid}`,
        ]);
        if (res[0].status === 'duplicate') return { outcome: 'duplicate', txid: ch.txid, tenant: ch.tenant_id, debited: ex[0].debited_micros };
        await c.query('update pix_refunds set debited_micros = $3 where end_to_end_id = $1 and refund_id = $2', [endToEndId, d.id, res[0].debited]);
        // the top-up's nota fiscal is cancelled when the whole top-up was given back (src/nfse)
        const cancel = await cancelForRefund(c, ch.txid);
        return { outcome: res[0].status as RefundOutcome, txid: ch.txid, tenant: ch.tenant_id, debited: res[0].debited, cancel };
      },
    );
    if (r.cancel) this.opts.invoices?.();
    const fields = {
      via,
      e2e: endToEndId,
      refund_id: d.id,
      txid: r.txid,
      tenant: r.tenant,
      amount_micros: String(d.amountMicros),
      debited_micros: r.debited === undefined ? undefined : String(r.debited),
    };
    if ((r.outcome === 'refunded' || r.outcome === 'shortfall') && r.tenant) await this.opts.notify?.(r.tenant, []);
    if (r.outcome === 'shortfall') log.error('pix refund exceeded the available balance: debited only what was available', fields);
    else if (r.outcome === 'unknown_payment' || r.outcome === 'exceeds_payment') log.warn('pix refund ignored', { ...fields, outcome: r.outcome });
    else log.info('pix refund', { ...fields, outcome: r.outcome });
    await this.audit(this.db, { outcome: `refund_${r.outcome}`, txid: r.txid, e2e: endToEndId, detail: `${via}: devolução ${d.id} ${d.status}` });
    return r.outcome;
  }

  /** Operator action: refund (part of) a paid top-up through the PSP; the debit happens when it is DEVOLVIDO. */
  async requestRefund(txid: string, amountMicros: bigint, refundId = randomBytes(12).toString('hex')): Promise<RefundOutcome> {
    const { rows } = await this.db.query('select * from pix_charges where txid = $1', [txid]);
    const ch = rows[0] as ChargeRow | undefined;
    if (!ch?.end_to_end_id) throw new Error('charge not paid');
    const d = await this.psp.refund({ endToEndId: ch.end_to_end_id, refundId, amountMicros, description: 'Devolução catraca' });
    return this.applyRefund(ch.end_to_end_id, d, 'request');
  }

  /** Asks the PSP about one open charge: credits a payment whose webhook never came, expires, removes. */
  async reconcileCharge(txid: string): Promise<ChargeStatus | null> {
    const { rows } = await this.db.query('select * from pix_charges where txid = $1 and id_rec is null', [txid]);
    const ch = rows[0] as ChargeRow | undefined;
    if (!ch) return null;
    if (ch.status !== 'ATIVA') return ch.status;
    const cob = await this.psp.getCharge(txid);
    const expired = ch.expires_at.getTime() < Date.now();
    if (cob?.status === 'CONCLUIDA') {
      for (const p of cob.pix) await this.applyPayment({ ...p, txid: p.txid ?? txid }, 'reconcile');
    } else if (cob && cob.status !== 'ATIVA') {
      await this.db.query(`update pix_charges set status = $2 where txid = $1 and status = 'ATIVA'`, [txid, cob.status]);
    } else if (expired) {
      await this.db.query(`update pix_charges set status = 'EXPIRADA' where txid = $1 and status = 'ATIVA'`, [txid]);
      log.info('pix charge expired', { txid, tenant: ch.tenant_id, known_to_psp: !!cob });
    }
    const { rows: after } = await this.db.query('update pix_charges set checked_at = now() where txid = $1 returning status', [txid]);
    return after[0].status;
  }

  /** One pass over open charges, least recently checked first. */
  async reconcileOnce(limit = 50): Promise<{ checked: number; failed: number }> {
    const { rows } = await this.db.query(
      `select txid from pix_charges where status = 'ATIVA' and id_rec is null order by checked_at nulls first, created_at limit $1`,
      [limit],
    );
    let failed = 0;
    for (const r of rows) {
      try {
        await this.reconcileCharge(r.txid);
      } catch (err) {
        failed++;
        log.warn('pix reconcile failed', { txid: r.txid, err });
      }
    }
    // when it last ran and what it found, for the operator's console
    await this.db.query(
      `insert into pix_reconciler_status (name, last_run_at, checked, failed) values ('reconciler', now(), $1, $2)
       on conflict (name) do update set last_run_at = excluded.last_run_at, checked = excluded.checked, failed = excluded.failed`,
      [rows.length, failed],
    );
    return { checked: rows.length, failed };
  }

  startReconciler(intervalMs: number): void {
    if (this.timer || intervalMs <= 0) return;
    this.timer = setInterval(() => {
      if (this.reconciling) return;
      this.reconciling = this.reconcileOnce()
        .catch((err) => log.warn('pix reconcile pass failed', { err }))
        .finally(() => (this.reconciling = null));
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.reconciling;
  }
}
