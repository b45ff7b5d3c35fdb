import { AckPolicy, type ConsumerMessages, DeliverPolicy, DiscardPolicy, type JsMsg, type NatsConnection, RetentionPolicy, StorageType } from 'nats';
import { z } from 'zod';
import { decodeJson, encode } from '../bus/messages.ts';
import { natsClusterSize } from '../bus/usage-stream.ts';
import { NFSE_DURABLE, NFSE_STREAM, subjects } from '../bus/subjects.ts';
import { type Db, withTransaction } from '../db/pool.ts';
import { createLogger, type Logger } from '../log.ts';
import { publishMade } from '../notify/bus.ts';
import { invoiceIssuedEvent, type NotifyEvent } from '../notify/events.ts';
import { DUPLICATE_DPS, type SefinClient, type SefinError } from './client.ts';
import { buildDps, type Prestador } from './dps.ts';
import { buildCancelRequest } from './event.ts';
import { parseXml, summarizeNfse } from './nfse-xml.ts';
import { currentProfile, tomadorOf } from './profiles.ts';
import { signEnveloped } from './sign.ts';
import type { A1Certificate } from './certificate.ts';
import { type InvoiceRow, makeMissing, REFUND_NOTE } from './store.ts';

// The issuer: turns the invoices rows (the outbox, migrations/061) into notas fiscais at Sefin
// Nacional, and cancels them. It runs in the portal process (which credits the top-ups), any
// number of portals at once:
//   - a relay publishes the rows that are due (new, retried, to cancel) to the JetStream stream
//     NFSE, msgID = id:op:attempt (a duplicate within two minutes is dropped by the server);
//   - a durable consumer (shared) takes each, claims the row for a lease (so two issuers never
//     send the same DPS at once) and does the work; the schedule of attempts lives in the row,
//     so a restart, a lost message or a dead issuer loses nothing: the relay publishes it again;
//   - the DPS number is the idempotency key: the signed DPS is stored before it is sent and sent
//     again byte for byte, and when Sefin answers E0014 (that number made an NFS-e already) the
//     issuer fetches the NFS-e made from this DPS (GET /dps/{id}, GET /nfse/{key}) and keeps it
//     when it carries this very DPS (same signature) — a repeat, not a second note;
//   - Sefin unavailable (5xx, 429, a timeout, no connection): tried again later, backing off;
//     a rejection stops until an operator retries it (console, `catraca nfse retry`);
//   - a sweep makes the notes that should exist and do not (a top-up credited while the issuer
//     could not record one; the monthly notes) — the reconciliation (store.ts reconcile) shows
//     every credited top-up with its note or the reason it has none.

const log = createLogger('nfse');

const WireSchema = z.object({ v: z.literal(1), id: z.string().regex(/^inv_[0-9a-f]{32}$/), op: z.enum(['issue', 'cancel']) });

/** Delays after an unavailable answer: 10 s, 30 s, 1 min, 2 min, 5 min, 10 min, 30 min, then hourly. */
export const DEFAULT_RETRY_MS = [10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000];

export interface IssuerOptions {
  db: Db;
  nc: NatsConnection | null;
  client: SefinClient;
  cert: Pick<A1Certificate, 'keyPem' | 'certPem'>;
  prestador: Prestador;
  emitOn: 'topup' | 'monthly';
  cancelDays: number;
  /** the portal's public base URL: `${site.url}/notas-fiscais/{id}/xml` goes into invoice.issued */
  site: { url: string };
  retryMs?: number[];
  relayIntervalMs?: number;
  sweepIntervalMs?: number;
  leaseMs?: number;
  log?: Logger;
}

export type IssueResult = 'issued' | 'repeat' | 'rejected' | 'unavailable' | 'skipped';
export type CancelResult = 'cancelled' | 'outside_window' | 'refused' | 'unavailable' | 'skipped';

export class Issuer {
  private stopping = false;
  private messages: ConsumerMessages | undefined;
  private consuming: Promise<void> | null = null;
  private timers: NodeJS.Timeout[] = [];
  private running = new Set<Promise<unknown>>();
  private relaying: Promise<void> | null = null;
  private readonly log: Logger;

  constructor(private readonly o: IssuerOptions) {
    this.log = o.log ?? log;
  }

  /** Records that issuing is on (the since date, the mode, the series), then relays, consumes and sweeps. */
  async start(): Promise<void> {
    await this.o.db.query(`insert into nfse_settings (name, value) values ('since', now()::text) on conflict (name) do nothing;`);
    await this.o.db.query(
      `insert into nfse_settings (name, value) values ('emit_on', $1), ('serie', $2)
       on conflict (name) do update set value = excluded.value, updated_at = now()`,
      [this.o.emitOn, this.o.prestador.serie],
    );
    if (this.o.nc) {
      await ensureNfseConsumer(this.o.nc, (this.o.leaseMs ?? 120_000) + 30_000);
      this.consuming = this.consume();
    }
    this.every(this.o.relayIntervalMs ?? 2000, () => this.relay());
    this.every(this.o.sweepIntervalMs ?? 60_000, () => this.sweep());
    this.log.info('nfse issuer running', {
      emit_on: this.o.emitOn,
      ambiente: this.o.prestador.ambiente,
      cnpj: this.o.prestador.cnpj,
      serie: this.o.prestador.serie,
    });
  }

  private every(ms: number, fn: () => Promise<unknown>): void {
    let busy = false;
    const tick = () => {
      if (busy || this.stopping) return;
      busy = true;
      this.track(fn().catch((err) => this.log.warn('nfse task failed; tried again', { err: err as Error }))).finally(() => (busy = false));
    };
    const t = setInterval(tick, ms);
    t.unref();
    this.timers.push(t);
    tick();
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.running.add(p);
    return p.finally(() => this.running.delete(p));
  }

  /** Publishes these invoices now (after the transaction that made them committed); the relay would, a little later. */
  kick(): void {
    if (!this.stopping) void this.track(this.relay().catch((err) => this.log.warn('nfse relay failed; tried again', { err: err as Error })));
  }

  /** Publishes what is due. Without NATS it does the work itself. */
  relay(): Promise<void> {
    this.relaying ??= (async () => {
      try {
        const { rows } = await this.o.db.query(
          `select id, attempts, case when state = 'pending' then 'issue' else 'cancel' end as op from invoices
            where (state = 'pending' or (state = 'issued' and cancel_state = 'pending'))
              and next_attempt_at <= now() and (claimed_until is null or claimed_until < now())
              and (published_at is null or published_at < next_attempt_at or published_at < now() - interval '5 minutes')
            order by next_attempt_at limit 100`,
        );
        for (const r of rows) {
          if (this.stopping) break;
          if (!this.o.nc) {
            await this.handle(r.id, r.op);
            continue;
          }
          try {
            await this.o.nc
              .jetstream()
              .publish(subjects.nfse(r.op), encode({ v: 1, id: r.id, op: r.op }), { msgID: `${r.id}:${r.op}:${r.attempts}`, timeout: 5000 });
            await this.o.db.query('update invoices set published_at = now() where id = $1', [r.id]);
          } catch (err) {
            this.log.warn('nfse work not published yet; the relay retries', { invoice_id: r.id, err: err as Error });
            break;
          }
        }
      } finally {
        this.relaying = null;
      }
    })();
    return this.relaying;
  }

  private async consume(): Promise<void> {
    while (!this.stopping) {
      try {
        const consumer = await this.o.nc!.jetstream().consumers.get(NFSE_STREAM, NFSE_DURABLE);
        this.messages = await consumer.consume({ max_messages: 8, expires: 2000 });
        for await (const msg of this.messages) {
          await this.onMessage(msg);
          if (this.stopping) break;
        }
      } catch (err) {
        if (this.stopping) break;
        this.log.warn('nfse consumer interrupted; resuming', { err: err as Error });
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  private async onMessage(msg: JsMsg): Promise<void> {
    let parsed: z.infer<typeof WireSchema>;
    try {
      parsed = WireSchema.parse(decodeJson(msg.data));
    } catch {
      this.log.error('nfse message unreadable: dropped', { subject: msg.subject });
      msg.term();
      return;
    }
    try {
      await this.track(this.handle(parsed.id, parsed.op));
      msg.ack();
    } catch (err) {
      this.log.warn('nfse work failed; redelivered', { invoice_id: parsed.id, op: parsed.op, err: err as Error });
      msg.nak(5000);
    }
  }

  handle(id: string, op: 'issue' | 'cancel'): Promise<IssueResult | CancelResult> {
    return op === 'issue' ? this.issue(id) : this.cancel(id);
  }

  private delay(attempts: number): number {
    const s = this.o.retryMs ?? DEFAULT_RETRY_MS;
    return s[Math.min(Math.max(attempts - 1, 0), s.length - 1)];
  }

  /** One attempt to issue one note. */
  async issue(id: string): Promise<IssueResult> {
    const lease = this.o.leaseMs ?? 120_000;
    const { rows } = await this.o.db.query(
      `update invoices set claimed_until = now() + $2 * interval '1 millisecond', attempts = attempts + 1, updated_at = now()
        where id = $1 and state = 'pending' and next_attempt_at <= now() + interval '1 second' and (claimed_until is null or claimed_until < now())
        returning *`,
      [id, lease],
    );
    const row = rows[0] as InvoiceRow | undefined;
    if (!row) return 'skipped';
    const fields = { invoice_id: id, tenant_id: row.tenant_id, attempt: row.attempts };
    let { dps_xml: dpsXml, dps_id: dpsId } = row;
    if (!dpsXml || !dpsId) {
      const profile = await currentProfile(this.o.db, row.tenant_id);
      const built = buildDps(this.o.prestador, {
        number: String(row.dps_number),
        issuedAt: new Date(),
        competence: row.competence_at,
        amountMicros: BigInt(row.amount_micros),
        tomador: profile ? tomadorOf(profile) : null,
        reference: row.pix_txid ?? (row.period ? `recargas de ${row.period.toISOString().slice(0, 7)}` : undefined),
      });
      dpsXml = signEnveloped(built.xml, 'infDPS', 'DPS', this.o.cert);
      dpsId = built.id;
      // stored before it is sent: what Sefin receives is what the row keeps, on every attempt
      await this.o.db.query('update invoices set dps_id = $2, dps_xml = $3, profile_id = $4, updated_at = now() where id = $1', [
        id,
        dpsId,
        dpsXml,
        profile?.id ?? null,
      ]);
    }
    const sent = await this.o.client.sendDps(dpsXml);
    if (sent.kind === 'issued') return this.issued(row, sent.accessKey, sent.nfseXml, 'issued');
    if (sent.kind === 'unavailable') return this.later(row, sent.reason);
    if (sent.errors.some((e) => e.code === DUPLICATE_DPS)) {
      // a repeat? the NFS-e made from this DPS's Id must carry this very DPS (its signature)
      const found = await this.o.client.accessKeyOfDps(dpsId);
      if (found.kind === 'unavailable') return this.later(row, found.reason);
      const nfse = found.kind === 'found' ? await this.o.client.fetchNfse(found.accessKey) : ({ kind: 'none' } as const);
      if (nfse.kind === 'unavailable') return this.later(row, nfse.reason);
      if (found.kind === 'found' && nfse.kind === 'found' && sameDps(nfse.nfseXml.toString('utf8'), dpsXml)) {
        this.log.info('nfse: Sefin already had this DPS; its NFS-e is kept (a repeat, not a second note)', { ...fields, access_key: found.accessKey });
        return this.issued(row, found.accessKey, nfse.nfseXml, 'repeat');
      }
      const other = found.kind === 'found' ? ` by the NFS-e ${found.accessKey}` : '';
      return this.rejected(row, [
        {
          code: DUPLICATE_DPS,
          message: `DPS number ${row.dps_number} (series ${row.dps_serie}) is used${other}, made from another DPS: give catraca a series of its own (NFSE_SERIE) and retry`,
        },
      ]);
    }
    return this.rejected(row, sent.errors);
  }

  private async issued(row: InvoiceRow, accessKey: string, xml: Buffer, result: 'issued' | 'repeat'): Promise<IssueResult> {
    let summary: ReturnType<typeof summarizeNfse> | null = null;
    try {
      summary = summarizeNfse(xml.toString('utf8'));
    } catch (err) {
      this.log.error('nfse: Sefin returned a document catraca cannot read; kept as it came', { invoice_id: row.id, err: err as Error });
    }
    const events = await withTransaction(this.o.db, async (c): Promise<NotifyEvent[]> => {
      await c.query(
        `update invoices set state = 'issued', access_key = $2, nfse_number = $3, nfse_xml = $4, issued_at = coalesce($5::timestamptz, now()),
                error_code = null, error_message = null, claimed_until = null, updated_at = now()
          where id = $1`,
        [row.id, accessKey, summary?.number ?? null, xml, summary?.processedAt || null],
      );
      return invoiceIssuedEvent(c, row.id, `${this.o.site.url.replace(/\/+$/, '')}/notas-fiscais/${row.id}/xml`);
    });
    this.log.info('nfse issued', { invoice_id: row.id, tenant_id: row.tenant_id, access_key: accessKey, number: summary?.number, via: result });
    await publishMade(this.o.db, this.o.nc, events, this.log);
    return result;
  }

  private async later(row: InvoiceRow, reason: string): Promise<IssueResult> {
    const ms = this.delay(row.attempts);
    await this.o.db.query(
      `update invoices set next_attempt_at = now() + $2 * interval '1 millisecond', error_code = null, error_message = $3, claimed_until = null, updated_at = now() where id = $1`,
      [row.id, ms, `Sefin unavailable: ${reason}`.slice(0, 500)],
    );
    this.log.warn('nfse: Sefin unavailable; tried again later', { invoice_id: row.id, attempt: row.attempts, retry_in_ms: ms, reason });
    return 'unavailable';
  }

  private async rejected(row: InvoiceRow, errors: SefinError[]): Promise<IssueResult> {
    const code = errors
      .map((e) => e.code)
      .join(',')
      .slice(0, 100);
    const message = errors
      .map((e) => [e.message, e.complement].filter(Boolean).join(' — '))
      .join(' | ')
      .slice(0, 2000);
    await this.o.db.query(
      `update invoices set state = 'rejected', error_code = $2, error_message = $3, claimed_until = null, updated_at = now() where id = $1`,
      [row.id, code, message],
    );
    this.log.error('nfse rejected by Sefin: fix and retry from the console or `catraca nfse retry`', {
      invoice_id: row.id,
      tenant_id: row.tenant_id,
      code,
      message,
    });
    return 'rejected';
  }

  /** One attempt to cancel one issued note (a refund, an operator's request). */
  async cancel(id: string): Promise<CancelResult> {
    const lease = this.o.leaseMs ?? 120_000;
    const { rows } = await this.o.db.query(
      `update invoices set claimed_until = now() + $2 * interval '1 millisecond', attempts = attempts + 1, updated_at = now()
        where id = $1 and state = 'issued' and cancel_state = 'pending' and (claimed_until is null or claimed_until < now())
        returning *`,
      [id, lease],
    );
    const row = rows[0] as InvoiceRow | undefined;
    if (!row?.access_key || !row.issued_at) return 'skipped';
    const set = (state: string, note: string | null, extra = '') =>
      this.o.db.query(
        `update invoices set cancel_state = $2, cancel_note = coalesce($3, cancel_note), claimed_until = null, updated_at = now()${extra} where id = $1`,
        [id, state, note],
      );
    const windowEnd = row.issued_at.getTime() + this.o.cancelDays * 86_400_000;
    const outside = `issued on ${row.issued_at.toISOString().slice(0, 10)}, more than ${this.o.cancelDays} days ago (NFSE_CANCEL_DAYS): ask the municipality for a cancellation by fiscal analysis (evento e101103, in the Emissor Nacional) or issue a substitute note`;
    if (Date.now() > windowEnd) {
      await set('outside_window', outside);
      this.log.warn('nfse: cancellation outside the window; the operator must act', { invoice_id: id, access_key: row.access_key });
      return 'outside_window';
    }
    // a refund: "serviço não prestado"; an operator's request: "outros", in the operator's words
    const refund = !row.cancel_note || row.cancel_note === REFUND_NOTE;
    const ev = buildCancelRequest(this.o.prestador, {
      accessKey: row.access_key,
      at: new Date(),
      reason: refund ? '2' : '9',
      text: refund ? `Recarga devolvida ao cliente por Pix (${row.pix_txid ?? row.id})` : row.cancel_note!,
    });
    const sent = await this.o.client.sendEvent(row.access_key, signEnveloped(ev.xml, 'infPedReg', 'pedRegEvento', this.o.cert));
    if (sent.kind === 'registered') {
      await this.o.db.query(
        `update invoices set cancel_state = 'done', cancelled_at = now(), event_xml = $2, claimed_until = null, updated_at = now() where id = $1`,
        [id, sent.eventXml],
      );
      this.log.info('nfse cancelled', { invoice_id: id, access_key: row.access_key });
      return 'cancelled';
    }
    if (sent.kind === 'unavailable') {
      await this.o.db.query(
        `update invoices set next_attempt_at = now() + $2 * interval '1 millisecond', claimed_until = null, updated_at = now() where id = $1`,
        [id, this.delay(row.attempts)],
      );
      return 'unavailable';
    }
    const text = sent.errors
      .map((e) => `${e.code}: ${e.message}`)
      .join(' | ')
      .slice(0, 1000);
    if (sent.errors.some((e) => e.code === 'E0835')) {
      await set('outside_window', `${text} — ${outside}`);
      return 'outside_window';
    }
    await set('refused', text);
    this.log.error('nfse cancellation refused by Sefin', { invoice_id: id, access_key: row.access_key, errors: text });
    return 'refused';
  }

  /** The notes that should exist and do not (see store.ts makeMissing), published. */
  async sweep(): Promise<string[]> {
    const made = await makeMissing(this.o.db, this.o.prestador.serie, this.o.emitOn);
    if (made.length > 0) {
      this.log.info('nfse sweep made notes', { count: made.length, emit_on: this.o.emitOn });
      await this.relay();
    }
    return made;
  }

  /** Waits for the work in progress. */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    for (const t of this.timers) clearInterval(t);
    await this.messages?.close().catch(() => {});
    await Promise.race([this.consuming?.catch(() => {}), new Promise((r) => setTimeout(r, 2000))]);
    await this.idle();
  }
}

/** Whether an NFS-e carries this signed DPS (the same signature value over the same Id). */
export function sameDps(nfseXml: string, signedDps: string): boolean {
  try {
    const sig = (doc: Document, root: Element | null) => {
      const dps = root ?? doc.getElementsByTagNameNS('*', 'DPS')[0];
      const own = Array.from(dps.childNodes).find((n) => n.nodeType === 1 && (n as Element).localName === 'Signature') as Element | undefined;
      return {
        id: dps.getElementsByTagNameNS('*', 'infDPS')[0]?.getAttribute('Id'),
        value: own?.getElementsByTagNameNS('*', 'SignatureValue')[0]?.textContent?.replace(/\s+/g, ''),
      };
    };
    const ours = parseXml(signedDps);
    const a = sig(ours, ours.documentElement);
    const b = sig(parseXml(nfseXml), null);
    return !!a.id && !!a.value && a.id === b.id && a.value === b.value;
  } catch {
    return false;
  }
}

/** The stream NFSE (work queue, file storage, replicas min(3, cluster)) and the issuers' durable consumer. */
export async function ensureNfseConsumer(nc: NatsConnection, ackWaitMs: number): Promise<void> {
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.streams.info(NFSE_STREAM);
  } catch (err) {
    if (!/not found/i.test(String((err as Error).message))) throw err;
    await jsm.streams
      .add({
        name: NFSE_STREAM,
        subjects: [subjects.nfseWildcard],
        retention: RetentionPolicy.Workqueue,
        storage: StorageType.File,
        discard: DiscardPolicy.New,
        max_bytes: 64 * 1024 ** 2,
        duplicate_window: 2 * 60 * 1e9,
        num_replicas: Math.max(1, Math.min(3, natsClusterSize(nc))),
      })
      .catch((e) => {
        if (!/already in use/i.test(String(e.message))) throw e;
      });
  }
  try {
    await jsm.consumers.info(NFSE_STREAM, NFSE_DURABLE);
  } catch {
    await jsm.consumers
      .add(NFSE_STREAM, {
        durable_name: NFSE_DURABLE,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: subjects.nfseWildcard,
        ack_wait: ackWaitMs * 1e6,
        max_deliver: -1,
      })
      .catch((e) => {
        if (!/already/i.test(String(e.message))) throw e;
      });
  }
}
