import { z } from 'zod';
import { fromValor, toValor } from './amount.ts';
import { type BcbPixAdapter, TXID_RE, toPayment } from './bcb.ts';
import { PspError, type PixPayment, type WebhookRequest } from './types.ts';

// Pix Automático over the BCB API Pix (bacen/pix-api 2.9): recurrences (/rec), their QR locations
// (/locrec), push requests to the payer's bank (/solicrec), recurring charges (/cobr) and their
// callbacks (/webhookrec → <url>/rec, /webhookcobr → <url>/cobr). Same OAuth2 + mTLS session as the
// one-off charges (BcbPixAdapter.request). Amounts cross this interface as micro-BRL.

export const REC_ID_RE = /^[a-zA-Z0-9]{29}$/;
export type RecStatus = 'CRIADA' | 'APROVADA' | 'REJEITADA' | 'EXPIRADA' | 'CANCELADA';
export type CobrStatus = 'CRIADA' | 'ATIVA' | 'CONCLUIDA' | 'EXPIRADA' | 'REJEITADA' | 'CANCELADA';
export type RetryPolicy = 'NAO_PERMITE' | 'PERMITE_3R_7D';
export type Journey = 'JORNADA_1' | 'JORNADA_2' | 'JORNADA_3' | 'JORNADA_4' | 'AGUARDANDO_DEFINICAO';
export type AccountType = 'CORRENTE' | 'POUPANCA' | 'PAGAMENTO';

/** The payer of a recurrence: a CPF (11 digits) or a CNPJ (14 alphanumerics), and a name. */
export type Payer = { cpf: string; nome: string } | { cnpj: string; nome: string };

/** Our account the charges pay into (cobr.recebedor): PIX_ACCOUNT_AGENCY/NUMBER/TYPE. */
export interface ReceiverAccount {
  agencia: string;
  conta: string;
  tipoConta: AccountType;
}

export interface Recurrence {
  idRec: string;
  status: RecStatus;
  periodicity: string;
  /** valor.valorMinimoRecebedor: the floor of the payer's own maximum. */
  minReceiverMicros: bigint | null;
  retryPolicy: RetryPolicy;
  locId: number | null;
  location: string | null;
  /** dadosQR.pixCopiaECola of GET /rec/{idRec}[?txid=]: the QR the payer scans (journeys 2 and 3). */
  brCode: string | null;
  journey: Journey | null;
  /** encerramento.cancelamento / rejeicao. */
  ended: { kind: 'cancelamento' | 'rejeicao'; by: string | null; code: string; description: string } | null;
}

export interface ChargeAttempt {
  date: string;
  type: string;
  status: 'SOLICITADA' | 'AGENDADA' | 'PAGA' | 'CANCELADA' | 'REJEITADA' | 'EXPIRADA';
  endToEndId: string;
  rejection: { code: string; description: string } | null;
}

export interface RecurringCharge {
  txid: string;
  idRec: string;
  status: CobrStatus;
  amountMicros: bigint;
  dueDate: string;
  retryPolicy: RetryPolicy | null;
  attempts: ChargeAttempt[];
  pix: PixPayment[];
}

export type RecWebhook = { ok: true; recs: { idRec: string; status: RecStatus }[] } | { ok: false; reason: 'bad_secret' | 'bad_body'; detail?: string };
export type CobrWebhook =
  | { ok: true; cobrs: { idRec: string; txid: string; status: CobrStatus }[] }
  | { ok: false; reason: 'bad_secret' | 'bad_body'; detail?: string };

export interface PspRecurrenceApi {
  readonly name: string;
  /** POST /locrec {tipo: rec}: the location a recurrence's QR points at. */
  createLocation(): Promise<{ id: number; location: string }>;
  /** POST /rec. `firstTxid`: journey 3 (the first payment, a cob, in the same QR). */
  createRecurrence(a: {
    payer: Payer;
    contract: string;
    object: string;
    startDate: string;
    periodicity: 'SEMANAL' | 'MENSAL';
    minReceiverMicros: bigint;
    retryPolicy: RetryPolicy;
    locId?: number;
    firstTxid?: string;
  }): Promise<Recurrence>;
  /** GET /rec/{idRec}[?txid=]; null when the PSP does not know it. */
  getRecurrence(idRec: string, txid?: string): Promise<Recurrence | null>;
  /** PATCH /rec/{idRec} {status: CANCELADA}: the receiver cancels. */
  cancelRecurrence(idRec: string): Promise<Recurrence>;
  /** POST /solicrec: journey 1, a push to the payer's bank. */
  requestConfirmation(a: {
    idRec: string;
    expiresAt: Date;
    destinatario: { conta: string; ispbParticipante: string; agencia?: string } & ({ cpf: string } | { cnpj: string });
  }): Promise<{ idSolicRec: string; status: string }>;
  /** PUT /cobr/{txid}. */
  createCharge(a: { txid: string; idRec: string; dueDate: string; amountMicros: bigint; account: ReceiverAccount; info?: string }): Promise<RecurringCharge>;
  /** GET /cobr/{txid}; null when the PSP does not know it. */
  getCharge(txid: string): Promise<RecurringCharge | null>;
  /** POST /cobr/{txid}/retentativa/{data}. */
  retryCharge(txid: string, date: string): Promise<RecurringCharge>;
  /** PATCH /cobr/{txid} {status: CANCELADA}. */
  cancelCharge(txid: string): Promise<RecurringCharge>;
  /** PUT /webhookrec and PUT /webhookcobr (callbacks come to <url>/rec and <url>/cobr). */
  registerWebhooks(webhookUrl: string): Promise<void>;
  verifyRecWebhook(req: WebhookRequest): RecWebhook;
  verifyCobrWebhook(req: WebhookRequest): CobrWebhook;
}

const Valor = z.string().regex(/^\d{1,10}\.\d{2}$/);

const EndedSchema = z
  .object({
    cancelamento: z.object({ solicitante: z.string().nullish(), codigo: z.string(), descricao: z.string() }).nullish(),
    rejeicao: z.object({ codigo: z.string(), descricao: z.string() }).nullish(),
  })
  .nullish();

const RecSchema = z.object({
  idRec: z.string().regex(REC_ID_RE),
  status: z.enum(['CRIADA', 'APROVADA', 'REJEITADA', 'EXPIRADA', 'CANCELADA']),
  calendario: z.object({ periodicidade: z.string(), dataInicial: z.string() }).partial().nullish(),
  valor: z.object({ valorRec: Valor.nullish(), valorMinimoRecebedor: Valor.nullish() }).nullish(),
  politicaRetentativa: z.enum(['NAO_PERMITE', 'PERMITE_3R_7D']),
  loc: z.object({ id: z.coerce.number().int(), location: z.string() }).partial().nullish(),
  ativacao: z.object({ tipoJornada: z.enum(['JORNADA_1', 'JORNADA_2', 'JORNADA_3', 'JORNADA_4', 'AGUARDANDO_DEFINICAO']).nullish() }).nullish(),
  encerramento: EndedSchema,
  dadosQR: z.object({ jornada: z.string().nullish(), pixCopiaECola: z.string().nullish() }).nullish(),
});

const AttemptSchema = z.object({
  dataLiquidacao: z.string(),
  tipo: z.string(),
  status: z.enum(['SOLICITADA', 'AGENDADA', 'PAGA', 'CANCELADA', 'REJEITADA', 'EXPIRADA']),
  endToEndId: z.string(),
  rejeicao: z.object({ codigo: z.string(), descricao: z.string() }).nullish(),
});

const PixSchema = z.object({
  endToEndId: z.string().regex(/^[a-zA-Z0-9]{32}$/),
  txid: z.string().nullish(),
  valor: Valor,
  horario: z.string(),
  devolucoes: z
    .array(z.object({ id: z.string(), rtrId: z.string().nullish(), valor: Valor, status: z.enum(['EM_PROCESSAMENTO', 'DEVOLVIDO', 'NAO_REALIZADO']) }))
    .nullish(),
});

const CobrStatusSchema = z.enum(['CRIADA', 'ATIVA', 'CONCLUIDA', 'EXPIRADA', 'REJEITADA', 'CANCELADA']);
const CobrSchema = z.object({
  idRec: z.string().regex(REC_ID_RE),
  txid: z.string().regex(TXID_RE),
  status: CobrStatusSchema,
  calendario: z.object({ dataDeVencimento: z.string() }),
  valor: z.object({ original: Valor }),
  politicaRetentativa: z.enum(['NAO_PERMITE', 'PERMITE_3R_7D']).nullish(),
  tentativas: z.array(AttemptSchema).nullish(),
  pix: z.array(PixSchema).nullish(),
});

export const RecWebhookBodySchema = z.object({
  recs: z.array(z.object({ idRec: z.string().regex(REC_ID_RE), status: RecSchema.shape.status })).min(1),
});
export const CobrWebhookBodySchema = z.object({
  cobsr: z.array(z.object({ idRec: z.string().regex(REC_ID_RE), txid: z.string().regex(TXID_RE), status: CobrStatusSchema })).min(1),
});

function toRecurrence(raw: unknown): Recurrence {
  const r = RecSchema.parse(raw);
  const c = r.encerramento?.cancelamento;
  const j = r.encerramento?.rejeicao;
  return {
    idRec: r.idRec,
    status: r.status,
    periodicity: r.calendario?.periodicidade ?? '',
    minReceiverMicros: r.valor?.valorMinimoRecebedor ? fromValor(r.valor.valorMinimoRecebedor) : null,
    retryPolicy: r.politicaRetentativa,
    locId: r.loc?.id ?? null,
    location: r.loc?.location ?? null,
    brCode: r.dadosQR?.pixCopiaECola ?? null,
    journey: r.ativacao?.tipoJornada ?? null,
    ended: c
      ? { kind: 'cancelamento', by: c.solicitante ?? null, code: c.codigo, description: c.descricao }
      : j
        ? { kind: 'rejeicao', by: null, code: j.codigo, description: j.descricao }
        : null,
  };
}

export function toRecurringCharge(raw: unknown): RecurringCharge {
  const c = CobrSchema.parse(raw);
  return {
    txid: c.txid,
    idRec: c.idRec,
    status: c.status,
    amountMicros: fromValor(c.valor.original),
    dueDate: c.calendario.dataDeVencimento,
    retryPolicy: c.politicaRetentativa ?? null,
    attempts: (c.tentativas ?? []).map((t) => ({
      date: t.dataLiquidacao,
      type: t.tipo,
      status: t.status,
      endToEndId: t.endToEndId,
      rejection: t.rejeicao ? { code: t.rejeicao.codigo, description: t.rejeicao.descricao } : null,
    })),
    pix: (c.pix ?? []).map((p) => toPayment({ ...p, txid: p.txid ?? c.txid })),
  };
}

function parseBody<T>(req: WebhookRequest, schema: z.ZodType<T>): { ok: true; body: T } | { ok: false; reason: 'bad_body'; detail?: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(req.rawBody.toString('utf8'));
  } catch {
    return { ok: false, reason: 'bad_body', detail: 'not JSON' };
  }
  const r = schema.safeParse(parsed);
  return r.success ? { ok: true, body: r.data } : { ok: false, reason: 'bad_body', detail: r.error.issues[0]?.message };
}

/** The recurrence endpoints of a BCB API Pix PSP, over the one-off adapter's session. */
export class BcbRecurrenceApi implements PspRecurrenceApi {
  readonly name: string;
  constructor(private readonly bcb: BcbPixAdapter) {
    this.name = bcb.name;
  }

  private async expect(method: string, path: string, ok: number[], body?: unknown): Promise<unknown> {
    const res = await this.bcb.request(method, path, body);
    if (!ok.includes(res.status)) throw new PspError(res.status, `${method} ${path.split('?')[0]} failed (HTTP ${res.status})`, res.json);
    return res.json;
  }

  async createLocation(): Promise<{ id: number; location: string }> {
    const j = z.object({ id: z.coerce.number().int(), location: z.string() }).parse(await this.expect('POST', '/locrec', [201, 200], { tipo: 'rec' }));
    return { id: j.id, location: j.location };
  }

  async createRecurrence(a: Parameters<PspRecurrenceApi['createRecurrence']>[0]): Promise<Recurrence> {
    const body = {
      vinculo: { objeto: a.object.slice(0, 35), contrato: a.contract.slice(0, 35), devedor: a.payer },
      calendario: { dataInicial: a.startDate, periodicidade: a.periodicity },
      valor: { valorMinimoRecebedor: toValor(a.minReceiverMicros) },
      politicaRetentativa: a.retryPolicy,
      ...(a.locId !== undefined ? { loc: a.locId } : {}),
      ...(a.firstTxid ? { ativacao: { dadosJornada: { txid: a.firstTxid } } } : {}),
    };
    return toRecurrence(await this.expect('POST', '/rec', [201, 200], body));
  }

  async getRecurrence(idRec: string, txid?: string): Promise<Recurrence | null> {
    const q = txid ? `?txid=${encodeURIComponent(txid)}` : '';
    const res = await this.bcb.request('GET', `/rec/${encodeURIComponent(idRec)}${q}`);
    if (res.status === 404) return null;
    if (res.status !== 200) throw new PspError(res.status, `GET /rec failed (HTTP ${res.status})`, res.json);
    return toRecurrence(res.json);
  }

  async cancelRecurrence(idRec: string): Promise<Recurrence> {
    return toRecurrence(await this.expect('PATCH', `/rec/${encodeURIComponent(idRec)}`, [200], { status: 'CANCELADA' }));
  }

  async requestConfirmation(a: Parameters<PspRecurrenceApi['requestConfirmation']>[0]): Promise<{ idSolicRec: string; status: string }> {
    const j = await this.expect('POST', '/solicrec', [201, 200], {
      idRec: a.idRec,
      calendario: { dataExpiracaoSolicitacao: a.expiresAt.toISOString() },
      destinatario: a.destinatario,
    });
    return z.object({ idSolicRec: z.string(), status: z.string() }).parse(j);
  }

  async createCharge(a: Parameters<PspRecurrenceApi['createCharge']>[0]): Promise<RecurringCharge> {
    if (!TXID_RE.test(a.txid)) throw new RangeError('txid must match [a-zA-Z0-9]{26,35}');
    const j = await this.expect('PUT', `/cobr/${a.txid}`, [201, 200], {
      idRec: a.idRec,
      ...(a.info ? { infoAdicional: a.info.slice(0, 140) } : {}),
      calendario: { dataDeVencimento: a.dueDate },
      valor: { original: toValor(a.amountMicros) },
      ajusteDiaUtil: true,
      recebedor: a.account,
    });
    return toRecurringCharge(j);
  }

  async getCharge(txid: string): Promise<RecurringCharge | null> {
    const res = await this.bcb.request('GET', `/cobr/${encodeURIComponent(txid)}`);
    if (res.status === 404) return null;
    if (res.status !== 200) throw new PspError(res.status, `GET /cobr failed (HTTP ${res.status})`, res.json);
    return toRecurringCharge(res.json);
  }

  async retryCharge(txid: string, date: string): Promise<RecurringCharge> {
    return toRecurringCharge(await this.expect('POST', `/cobr/${encodeURIComponent(txid)}/retentativa/${date}`, [201, 200]));
  }

  async cancelCharge(txid: string): Promise<RecurringCharge> {
    return toRecurringCharge(await this.expect('PATCH', `/cobr/${encodeURIComponent(txid)}`, [200], { status: 'CANCELADA' }));
  }

  async registerWebhooks(webhookUrl: string): Promise<void> {
    await this.expect('PUT', '/webhookrec', [200, 201, 204], { webhookUrl });
    await this.expect('PUT', '/webhookcobr', [200, 201, 204], { webhookUrl });
  }

  verifyRecWebhook(req: WebhookRequest): RecWebhook {
    if (!this.bcb.secretOk(req.secret)) return { ok: false, reason: 'bad_secret' };
    const b = parseBody(req, RecWebhookBodySchema);
    return b.ok ? { ok: true, recs: b.body.recs } : b;
  }

  verifyCobrWebhook(req: WebhookRequest): CobrWebhook {
    if (!this.bcb.secretOk(req.secret)) return { ok: false, reason: 'bad_secret' };
    const b = parseBody(req, CobrWebhookBodySchema);
    return b.ok ? { ok: true, cobrs: b.body.cobsr } : b;
  }
}
