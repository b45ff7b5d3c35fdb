import type pg from 'pg';
import { todayInSaoPaulo } from '../../billing/tenant-days.ts';
import { withTransaction } from '../../db/pool.ts';
import { createLogger } from '../../log.ts';
import { type NotifyEvent, recurringFailedEvent } from '../../notify/events.ts';
import { CENTAVO_MICROS, TOPUP_MAX_MICROS, TOPUP_MIN_MICROS } from '../limits.ts';
import type { CobrWebhook, PspRecurrenceApi, ReceiverAccount, RecStatus, RecurringCharge, RecWebhook } from '../recurrence.ts';
import { auditText, newTxid, type PixService } from '../service.ts';
import type { WebhookRequest } from '../types.ts';
import {
  addDays,
  addPeriod,
  daysBetween,
  dueDateFor,
  LEAD_DAYS,
  type Periodicity,
  type Projection,
  projectCharge,
  RATE_WINDOW_DAYS,
  RECURRING_MIN_MICROS,
  timeToSchedule,
} from './projection.ts';

// Recurring top-ups by Pix Automático (docs/billing.md, "Recarga automática"): the tenant's
// recurrence at the PSP, its authorization, the charge of each period (amount: projection.ts),
// the callbacks of recurrences and charges, failures and retries. A paid charge is credited by
// PixService.applyPayment (catraca_pix_credit: once per charge and endToEndId, topup.credited),
// exactly as a one-off top-up, after the PSP's GET /cobr/{txid} shows it paid.

const log = createLogger('pix');

/** Retry policy asked of the PSP: up to 3 new attempts within 7 days after the due date. */
export const RETRY_POLICY = 'PERMITE_3R_7D' as const;
/** Lifetime of a recurring charge's row in our table: its due date plus the 7 days of retries, plus one. */
const CHARGE_OPEN_DAYS = 8;
/** Advisory lock namespace of a tenant's recurring top-ups (second key: hashtext(tenant id)). */
const LOCK_RECURRING_TENANT = 7261105;

export interface RecurrenceRow {
  id_rec: string;
  tenant_id: string;
  provider: string;
  periodicity: Periodicity;
  target_micros: bigint;
  max_micros: bigint;
  payer_document: string;
  payer_name: string;
  retry_policy: string;
  journey: string;
  status: RecStatus;
  br_code: string | null;
  location: string | null;
  first_txid: string | null;
  next_due_date: string | null;
  ended_by: string | null;
  ended_code: string | null;
  ended_reason: string | null;
  created_at: Date;
  authorized_at: Date | null;
  ended_at: Date | null;
}

export interface RecurringChargeRow {
  txid: string;
  tenant_id: string;
  id_rec: string;
  amount_micros: bigint;
  status: string;
  due_date: string;
  failures: number;
  last_failure: string | null;
  end_to_end_id: string | null;
  created_at: Date;
  paid_at: Date | null;
}

export type RecurringErrorCode =
  | 'not_configured'
  | 'live_exists'
  | 'bad_document'
  | 'bad_name'
  | 'bad_target'
  | 'bad_max'
  | 'bad_first_amount'
  | 'bad_push'
  | 'not_live'
  | 'psp_refused';

export class RecurringError extends Error {
  constructor(
    readonly code: RecurringErrorCode,
    detail?: string,
  ) {
    super(detail ? `${code}: ${detail}` : code);
  }
}

export interface NewRecurrence {
  periodicity: Periodicity;
  targetMicros: bigint;
  maxMicros: bigint;
  payerDocument: string;
  payerName: string;
  /** JORNADA_3: a first one-off payment of this amount in the same QR; default journey 2 (authorization alone). */
  firstAmountMicros?: bigint;
  /** JORNADA_1: no QR, a request pushed to the payer's bank (POST /solicrec) for this account of the payer's. */
  push?: PayerAccount;
}

/** The payer's account a push request (journey 1) goes to: its bank's ISPB, agency, account. */
export interface PayerAccount {
  ispb: string;
  agency?: string;
  account: string;
}

/** How long the payer's bank keeps a push request (journey 1) open. */
const PUSH_VALID_DAYS = 2;

/** The payer's account as typed, checked: an 8-character ISPB, up to 4 digits of agency, up to 20 of account. */
export function normalizePayerAccount(a: { ispb?: string; agency?: string; account?: string }): PayerAccount | null {
  const ispb = String(a.ispb ?? '')
    .trim()
    .toUpperCase();
  const agency = String(a.agency ?? '').replace(/[\s.-]/g, '');
  const account = String(a.account ?? '').replace(/[\s.-]/g, '');
  if (!/^[0-9A-Z]{8}$/.test(ispb) || !/^\d{0,4}$/.test(agency) || !/^\d{1,20}$/.test(account)) return null;
  return { ispb, ...(agency ? { agency } : {}), account };
}

export interface ScheduleResult {
  idRec: string;
  tenantId: string;
  dueDate: string;
  projection: Projection;
  txid: string | null;
}

/** CPF (11 digits) or CNPJ (14, letters allowed since 2026), punctuation dropped; null when neither. */
export function normalizeDocument(text: string): { cpf: string } | { cnpj: string } | null {
  const t = String(text ?? '')
    .toUpperCase()
    .replace(/[.\-/\s]/g, '');
  if (/^\d{11}$/.test(t)) return { cpf: t };
  if (/^[0-9A-Z]{12}\d{2}$/.test(t)) return { cnpj: t };
  return null;
}

export class RecurringService {
  constructor(
    private readonly db: pg.Pool,
    readonly api: PspRecurrenceApi,
    private readonly pix: PixService,
    private readonly opts: {
      /** PIX_ACCOUNT_AGENCY / _NUMBER / _TYPE; null: recurring top-ups are off. */
      account: ReceiverAccount | null;
      notify?: (tenantId: string, events: NotifyEvent[]) => Promise<unknown>;
      /** The clock (tests move it). */
      now?: () => Date;
    },
  ) {}

  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;

  /** Reconciliation and the scheduling pass, every `intervalMs` (the portal: PIX_RECONCILE_INTERVAL_MS). */
  start(intervalMs: number): void {
    if (this.timer || intervalMs <= 0) return;
    this.timer = setInterval(() => {
      this.running ??= this.reconcileOnce()
        .then(() => this.runOnce())
        .catch((err) => log.warn('pix recurring pass failed', { err }))
        .finally(() => (this.running = null));
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  get enabled(): boolean {
    return this.opts.account !== null;
  }

  private now(): Date {
    return this.opts.now?.() ?? new Date();
  }

  /** The tenant's live recurrence, else its latest. */
  async current(tenantId: string): Promise<RecurrenceRow | null> {
    const { rows } = await this.db.query(
      `select *, next_due_date::text as next_due_date from pix_recurrences where tenant_id = $1
        order by (status in ('CRIADA', 'APROVADA')) desc, created_at desc limit 1`,
      [tenantId],
    );
    return rows[0] ?? null;
  }

  async charges(idRec: string, limit = 20): Promise<RecurringChargeRow[]> {
    const { rows } = await this.db.query(
      `select txid, tenant_id, id_rec, amount_micros, status, due_date::text as due_date, failures, last_failure, end_to_end_id, created_at, paid_at
         from pix_charges where id_rec = $1 order by due_date desc, created_at desc limit $2`,
      [idRec, limit],
    );
    return rows;
  }

  /** Creates the recurrence at the PSP (locrec + rec, and the first payment's cob for journey 3) and keeps its QR. */
  async create(tenantId: string, n: NewRecurrence): Promise<RecurrenceRow> {
    if (!this.opts.account) throw new RecurringError('not_configured');
    const doc = normalizeDocument(n.payerDocument);
    if (!doc) throw new RecurringError('bad_document');
    const name = String(n.payerName ?? '').trim();
    if (!name || name.length > 140) throw new RecurringError('bad_name');
    const whole = (v: bigint) => v % CENTAVO_MICROS === 0n;
    if (n.maxMicros < RECURRING_MIN_MICROS || n.maxMicros > TOPUP_MAX_MICROS || !whole(n.maxMicros)) throw new RecurringError('bad_max');
    if (n.targetMicros <= 0n || n.targetMicros > 10n * TOPUP_MAX_MICROS || !whole(n.targetMicros)) throw new RecurringError('bad_target');
    if (n.firstAmountMicros !== undefined && (n.firstAmountMicros < TOPUP_MIN_MICROS || n.firstAmountMicros > TOPUP_MAX_MICROS || !whole(n.firstAmountMicros)))
      throw new RecurringError('bad_first_amount');
    const push = n.push ? normalizePayerAccount(n.push) : null;
    if (n.push && (!push || n.firstAmountMicros !== undefined)) throw new RecurringError('bad_push');
    const live = await this.current(tenantId);
    if (live && (live.status === 'CRIADA' || live.status === 'APROVADA')) throw new RecurringError('live_exists');

    const first = n.firstAmountMicros !== undefined ? await this.pix.createTopUp(tenantId, n.firstAmountMicros) : null;
    // journey 1 has no QR: no location, the request goes to the payer's bank
    const loc = push ? null : await this.api.createLocation();
    const rec = await this.api.createRecurrence({
      payer: { ...doc, nome: name },
      contract: tenantId.slice(0, 35),
      object: 'Recarga automatica catraca',
      startDate: addDays(todayInSaoPaulo(this.now()), LEAD_DAYS),
      periodicity: n.periodicity,
      minReceiverMicros: n.maxMicros,
      retryPolicy: RETRY_POLICY,
      locId: loc?.id,
      firstTxid: first?.txid,
    });
    if (push) {
      try {
        const solic = await this.api.requestConfirmation({
          idRec: rec.idRec,
          expiresAt: new Date(this.now().getTime() + PUSH_VALID_DAYS * 86_400_000),
          destinatario: { ...doc, ispbParticipante: push.ispb, conta: push.account, ...(push.agency ? { agencia: push.agency } : {}) },
        });
        log.info('pix recurrence push request sent', { id_rec: rec.idRec, tenant: tenantId, id_solic_rec: solic.idSolicRec, status: solic.status });
      } catch (err) {
        await this.api.cancelRecurrence(rec.idRec).catch(() => undefined);
        throw err;
      }
    }
    const journey = push ? 'JORNADA_1' : first ? 'JORNADA_3' : 'JORNADA_2';
    const withQr = push ? rec : ((await this.api.getRecurrence(rec.idRec, first?.txid)) ?? rec);
    try {
      const { rows } = await this.db.query(
        `insert into pix_recurrences (id_rec, tenant_id, provider, periodicity, target_micros, max_micros, payer_document, payer_name, retry_policy, journey,
                                      status, br_code, location, first_txid)
         values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) returning *, next_due_date::text as next_due_date`,
        [
          rec.idRec,
          tenantId,
          this.api.name,
          n.periodicity,
          n.targetMicros,
          n.maxMicros,
          'cpf' in doc ? doc.cpf : doc.cnpj,
          name,
          RETRY_POLICY,
          journey,
          withQr.status,
          push ? null : withQr.brCode,
          push ? null : (withQr.location ?? loc?.location ?? null),
          first?.txid ?? null,
        ],
      );
      log.info('pix recurrence created', { id_rec: rec.idRec, tenant: tenantId, journey, periodicity: n.periodicity });
      return rows[0];
    } catch (err) {
      // a second live recurrence raced this one: cancel the one the PSP just made
      await this.api.cancelRecurrence(rec.idRec).catch(() => undefined);
      if ((err as { code?: string }).code === '23505') throw new RecurringError('live_exists');
      throw err;
    }
  }

  /** The tenant cancels (PATCH /rec {status: CANCELADA}); its open charges end with it at the PSP. */
  async cancel(tenantId: string): Promise<RecurrenceRow> {
    const live = await this.current(tenantId);
    if (!live || (live.status !== 'CRIADA' && live.status !== 'APROVADA')) throw new RecurringError('not_live');
    await this.api.cancelRecurrence(live.id_rec);
    return (await this.refreshRecurrence(live.id_rec))!;
  }

  /** Asks the PSP about a recurrence and applies what it says (authorization, end). */
  async refreshRecurrence(idRec: string): Promise<RecurrenceRow | null> {
    const rec = await this.api.getRecurrence(idRec);
    if (!rec) return null;
    const today = todayInSaoPaulo(this.now());
    const { rows } = await this.db.query(
      `update pix_recurrences r set
          status = $2,
          journey = coalesce($3, r.journey),
          authorized_at = case when $2 = 'APROVADA' then coalesce(r.authorized_at, now()) else r.authorized_at end,
          next_due_date = case when $2 = 'APROVADA' and r.next_due_date is null then $4::date else r.next_due_date end,
          ended_at = case when $2 in ('CANCELADA', 'REJEITADA', 'EXPIRADA') then coalesce(r.ended_at, now()) else r.ended_at end,
          ended_by = coalesce($5, r.ended_by), ended_code = coalesce($6, r.ended_code), ended_reason = coalesce($7, r.ended_reason),
          checked_at = now()
        where id_rec = $1
        returning (select status from pix_recurrences where id_rec = $1) as before, r.*, r.next_due_date::text as next_due_date`,
      [
        idRec,
        rec.status,
        rec.journey && rec.journey !== 'AGUARDANDO_DEFINICAO' ? rec.journey : null,
        addDays(today, LEAD_DAYS),
        rec.ended?.by ?? null,
        rec.ended?.code ?? null,
        auditText(rec.ended?.description) ?? null,
      ],
    );
    const row = rows[0] as (RecurrenceRow & { before: RecStatus }) | undefined;
    if (!row) return null;
    if (row.before !== row.status)
      log.info('pix recurrence status', { id_rec: idRec, tenant: row.tenant_id, from: row.before, to: row.status, by: row.ended_by });
    if (row.status === 'APROVADA' && row.before !== 'APROVADA') {
      // authorized: the first period's charge is scheduled at once
      await this.scheduleFor(idRec).catch((err) => log.warn('pix recurring charge not scheduled', { id_rec: idRec, err }));
    }
    if (row.status !== 'APROVADA' && row.status !== 'CRIADA') {
      // ended: its open charges are asked about (the PSP cancels them with the recurrence)
      for (const c of await this.charges(idRec)) if (c.status === 'ATIVA') await this.syncCharge(c.txid).catch(() => undefined);
    }
    return row;
  }

  /**
   * The charge of a recurrence's current period, when its time has come (LEAD_DAYS before the
   * period's due date, or late): amount by projectCharge(), none when the balance is expected to
   * stay at or above the target. The period then moves on (one charge per period).
   */
  async scheduleFor(idRec: string, at = this.now()): Promise<ScheduleResult | null> {
    const today = todayInSaoPaulo(at);
    return withTransaction(this.db, async (c) => {
      const { rows } = await c.query(`select *, next_due_date::text as next_due_date from pix_recurrences where id_rec = $1`, [idRec]);
      const rec = rows[0] as RecurrenceRow | undefined;
      if (rec?.status !== 'APROVADA' || !rec.next_due_date) return null;
      await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [LOCK_RECURRING_TENANT, rec.tenant_id]);
      const again = await c.query(`select next_due_date::text as d, status from pix_recurrences where id_rec = $1`, [idRec]);
      if (again.rows[0].status !== 'APROVADA' || again.rows[0].d !== rec.next_due_date) return null; // another pass did it
      if (!timeToSchedule(today, rec.next_due_date)) return null;
      const dueDate = dueDateFor(today, rec.next_due_date);
      const { rows: money } = await c.query(
        `select t.balance_micros,
                coalesce((select sum(l.amount_micros) from ledger l
                           where l.tenant_id = t.id and l.kind = 'debit' and l.source = 'request'
                             and l.created_at > $2::timestamptz - make_interval(days => $3) and l.created_at <= $2::timestamptz), 0)::bigint as spent
           from tenants t where t.id = $1`,
        [rec.tenant_id, at, RATE_WINDOW_DAYS],
      );
      const projection = projectCharge({
        balanceMicros: BigInt(money[0].balance_micros),
        spentWindowMicros: BigInt(money[0].spent),
        daysUntilDue: daysBetween(today, dueDate),
        targetMicros: BigInt(rec.target_micros),
        maxMicros: BigInt(rec.max_micros),
      });
      let txid: string | null = null;
      if (projection.amountMicros !== null) {
        txid = newTxid();
        await c.query(
          `insert into pix_charges (txid, tenant_id, amount_micros, status, provider, br_code, location, expires_at, id_rec, due_date)
           values ($1, $2, $3, 'ATIVA', $4, null, null, $5::date + make_interval(days => $6), $7, $5::date)`,
          [txid, rec.tenant_id, projection.amountMicros, this.api.name, dueDate, CHARGE_OPEN_DAYS, idRec],
        );
        // inside the transaction: a refused cobr leaves no row, a failed insert no call
        await this.api.createCharge({
          txid,
          idRec,
          dueDate,
          amountMicros: projection.amountMicros,
          account: this.opts.account!,
          info: 'Recarga automatica catraca',
        });
      }
      await c.query('update pix_recurrences set next_due_date = $2 where id_rec = $1', [idRec, addPeriod(rec.next_due_date, rec.periodicity)]);
      log.info('pix recurring charge', {
        id_rec: idRec,
        tenant: rec.tenant_id,
        due_date: dueDate,
        txid,
        amount_micros: projection.amountMicros === null ? null : String(projection.amountMicros),
        projected_micros: String(projection.projectedMicros),
        rule: projection.rule,
      });
      return { idRec, tenantId: rec.tenant_id, dueDate, projection, txid };
    });
  }

  /** One pass: every authorized recurrence whose period's charge is due to be sent (`catraca pix recurring run`, and hourly). */
  async runOnce(at = this.now()): Promise<{ checked: number; scheduled: ScheduleResult[]; failed: number }> {
    const { rows } = await this.db.query(
      `select id_rec from pix_recurrences where status = 'APROVADA' and next_due_date <= $1::date order by next_due_date limit 500`,
      [addDays(todayInSaoPaulo(at), LEAD_DAYS)],
    );
    const scheduled: ScheduleResult[] = [];
    let failed = 0;
    for (const r of rows) {
      try {
        const s = await this.scheduleFor(r.id_rec, at);
        if (s) scheduled.push(s);
      } catch (err) {
        failed++;
        log.warn('pix recurring charge not scheduled', { id_rec: r.id_rec, err });
      }
    }
    return { checked: rows.length, scheduled, failed };
  }

  /**
   * Asks the PSP about one recurring charge and applies it: paid → credited (once, by
   * PixService.applyPayment); a rejected attempt → topup.recurring_failed, and a retry asked for
   * the next day while the policy allows; ended (rejected, expired, cancelled) → its status.
   */
  async syncCharge(txid: string, at = this.now()): Promise<string | null> {
    const { rows } = await this.db.query(`select *, due_date::text as due_date from pix_charges where txid = $1 and id_rec is not null`, [txid]);
    const ch = rows[0] as RecurringChargeRow | undefined;
    if (!ch) return null;
    const cobr = await this.api.getCharge(txid);
    if (!cobr || cobr.idRec !== ch.id_rec) return ch.status;
    if (cobr.status === 'CONCLUIDA') {
      for (const p of cobr.pix) if (p.amountMicros === ch.amount_micros) await this.pix.applyPayment({ ...p, txid }, 'webhook');
      return 'CONCLUIDA';
    }
    await this.recordFailures(ch, cobr, at);
    if (cobr.status === 'REJEITADA' || cobr.status === 'EXPIRADA' || cobr.status === 'CANCELADA') {
      await this.db.query(`update pix_charges set status = $2, checked_at = now() where txid = $1 and status = 'ATIVA'`, [txid, cobr.status]);
    }
    return cobr.status;
  }

  private async recordFailures(ch: RecurringChargeRow, cobr: RecurringCharge, at: Date): Promise<void> {
    const rejected = cobr.attempts.filter((a) => a.status === 'REJEITADA' || a.status === 'EXPIRADA');
    if (rejected.length <= ch.failures) return;
    const last = rejected[rejected.length - 1];
    const reason = last.rejection ? `${last.rejection.code}: ${last.rejection.description}` : last.status;
    const today = todayInSaoPaulo(at);
    const retries = cobr.attempts.filter((a) => a.type !== 'AGND').length;
    const open = cobr.attempts.some((a) => a.status === 'AGENDADA' || a.status === 'SOLICITADA');
    const retryDate = addDays(today, 1);
    const willRetry = cobr.status === 'ATIVA' && cobr.retryPolicy === RETRY_POLICY && retries < 3 && !open && daysBetween(cobr.dueDate, retryDate) <= 7;
    const events = await withTransaction(this.db, async (c) => {
      const { rowCount } = await c.query('update pix_charges set failures = $2, last_failure = $3 where txid = $1 and failures < $2', [
        ch.txid,
        rejected.length,
        auditText(reason),
      ]);
      return rowCount ? recurringFailedEvent(c, ch.txid, rejected.length, reason, willRetry) : [];
    });
    if (events.length === 0) return; // another pass recorded it
    log.warn('pix recurring charge failed', {
      txid: ch.txid,
      id_rec: ch.id_rec,
      tenant: ch.tenant_id,
      attempt: rejected.length,
      reason,
      will_retry: willRetry,
    });
    await this.opts.notify?.(ch.tenant_id, events);
    if (willRetry) {
      try {
        await this.api.retryCharge(ch.txid, retryDate);
        log.info('pix recurring charge retry', { txid: ch.txid, date: retryDate });
      } catch (err) {
        log.warn('pix recurring charge retry refused', { txid: ch.txid, err });
      }
    }
  }

  /** PSP callbacks: <webhook>/rec and <webhook>/cobr. Each is only a notice: the PSP is asked. */
  async handleWebhook(
    kind: 'rec' | 'cobr',
    req: WebhookRequest & { remoteAddr?: string },
  ): Promise<{ status: number; body: unknown; rejected?: 'bad_secret' }> {
    const v: RecWebhook | CobrWebhook = kind === 'rec' ? this.api.verifyRecWebhook(req) : this.api.verifyCobrWebhook(req);
    if (!v.ok && v.reason === 'bad_secret') return { status: 401, body: { error: 'unauthorized' }, rejected: 'bad_secret' };
    if (!v.ok) {
      log.warn('pix recurrence webhook rejected', { kind, reason: v.reason, detail: v.detail, remote: req.remoteAddr });
      return { status: 400, body: { error: 'bad request' } };
    }
    try {
      if ('recs' in v) {
        for (const r of v.recs) {
          const { rowCount } = await this.db.query('select 1 from pix_recurrences where id_rec = $1', [r.idRec]);
          if (rowCount) await this.refreshRecurrence(r.idRec);
          else log.warn('pix recurrence webhook for an unknown recurrence', { id_rec: auditText(r.idRec), remote: req.remoteAddr });
        }
        return { status: 200, body: { received: v.recs.length } };
      }
      for (const c of v.cobrs) await this.syncCharge(c.txid);
      return { status: 200, body: { received: v.cobrs.length } };
    } catch (err) {
      log.warn('pix recurrence webhook: the PSP could not be asked', { kind, err });
      return { status: 503, body: { error: 'psp unavailable, deliver again' } };
    }
  }

  /** Reconciliation: recurrences awaiting authorization and open charges, asked about (callbacks may be lost). */
  async reconcileOnce(limit = 50): Promise<void> {
    const { rows: recs } = await this.db.query(
      `select id_rec from pix_recurrences where status in ('CRIADA', 'APROVADA') order by checked_at nulls first limit $1`,
      [limit],
    );
    for (const r of recs) await this.refreshRecurrence(r.id_rec).catch((err) => log.warn('pix recurrence reconcile failed', { id_rec: r.id_rec, err }));
    const { rows: open } = await this.db.query(
      `select txid from pix_charges where id_rec is not null and status = 'ATIVA' and due_date <= $1::date order by checked_at nulls first limit $2`,
      [todayInSaoPaulo(this.now()), limit],
    );
    for (const c of open) {
      await this.syncCharge(c.txid).catch((err) => log.warn('pix recurring charge reconcile failed', { txid: c.txid, err }));
      await this.db.query('update pix_charges set checked_at = now() where txid = $1', [c.txid]);
    }
  }
}
