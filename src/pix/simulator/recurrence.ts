import { todayInSaoPaulo } from '../../billing/tenant-days.ts';
import { randomBytes } from 'node:crypto';
import { createLogger } from '../../log.ts';
import { fromValor, toValor } from '../amount.ts';
import { TXID_RE } from '../bcb.ts';
import { buildRecurrenceBrCode } from '../brcode.ts';
import { httpRequest } from '../http.ts';
import { REC_ID_RE } from '../recurrence.ts';
import type { PixSimState, SimAnswer } from './state.ts';

// Pix Automático at the simulated PSP (bacen/pix-api 2.9): locations (/locrec), recurrences (/rec),
// push requests (/solicrec), recurring charges (/cobr, retries), their webhooks (/webhookrec,
// /webhookcobr → <url>/rec, <url>/cobr), and what the payer and the settlement system do
// (development endpoints under /sim/, HTTP Basic with the client credentials):
//   POST /sim/rec/{idRec}/autorizar  {valorMaximo?}  the payer authorizes (journey 3: pays its cob too)
//   POST /sim/rec/{idRec}/cancelar                   the payer cancels at their bank
//   POST /sim/cobr/{txid}/pagar                      the charge's current attempt settles now
//   POST /sim/cobr/{txid}/falhar     {codigo?}       the charge's current attempt is rejected
//   POST /sim/liquidar               {data?}         settles every attempt due on or before data
//   POST /sim/pagador/{idRec}/falhas {n}             the payer's next n attempts are rejected
// Dates are the simulator's calendar (America/Sao_Paulo), which a test may move (`today`).

const log = createLogger('pix-sim');

const DAY = 86_400_000;
const addDays = (d: string, n: number) => new Date(Date.parse(`${d}T00:00:00Z`) + n * DAY).toISOString().slice(0, 10);
const daysBetween = (a: string, b: string) => Math.round((Date.parse(`${b}T00:00:00Z`) - Date.parse(`${a}T00:00:00Z`)) / DAY);
const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;
const VALOR_RE = /^\d{1,10}\.\d{2}$/;
const alnum = (n: number) => [...randomBytes(n)].map((b) => 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'[b % 62]).join('');
const spDate = (at: Date) => todayInSaoPaulo(at);

type RecStatus = 'CRIADA' | 'APROVADA' | 'REJEITADA' | 'EXPIRADA' | 'CANCELADA';
type CobrStatus = 'CRIADA' | 'ATIVA' | 'CONCLUIDA' | 'EXPIRADA' | 'REJEITADA' | 'CANCELADA';
type Policy = 'NAO_PERMITE' | 'PERMITE_3R_7D';
type Cancel = { solicitante: string; codigo: string; descricao: string };

export interface SimLocRec {
  id: number;
  location: string;
  token: string;
  criacao: string;
  idRec?: string;
}
export interface SimRec {
  idRec: string;
  status: RecStatus;
  vinculo: { objeto?: string; contrato: string; devedor: { cpf?: string; cnpj?: string; nome: string } };
  calendario: { dataInicial: string; dataFinal?: string; periodicidade: string };
  valor: { valorRec?: string; valorMinimoRecebedor?: string };
  politicaRetentativa: Policy;
  loc?: SimLocRec;
  firstTxid?: string;
  tipoJornada: string;
  atualizacao: { status: RecStatus; data: string }[];
  encerramento?: { cancelamento?: Cancel; rejeicao?: { codigo: string; descricao: string } };
  pagador?: { cpf?: string; cnpj?: string; ispbParticipante: string };
  /** The payer's own maximum per charge (their bank's limit). */
  payerMax?: bigint;
  /** The payer's next attempts that are rejected. */
  failNext: number;
}
export interface SimAttempt {
  dataLiquidacao: string;
  tipo: 'AGND' | 'NTAG' | 'RIFL';
  status: 'SOLICITADA' | 'AGENDADA' | 'PAGA' | 'CANCELADA' | 'REJEITADA' | 'EXPIRADA';
  endToEndId: string;
  atualizacao: { status: string; data: string }[];
  rejeicao?: { codigo: string; descricao: string };
}
export interface SimCobr {
  idRec: string;
  txid: string;
  infoAdicional?: string;
  calendario: { criacao: string; dataDeVencimento: string };
  valor: { original: string };
  status: CobrStatus;
  politicaRetentativa: Policy;
  ajusteDiaUtil: boolean;
  recebedor: { agencia?: string; conta: string; tipoConta: string };
  atualizacao: { status: CobrStatus; data: string }[];
  encerramento?: { cancelamento?: Cancel; rejeicao?: { codigo: string; descricao: string } };
  tentativas: SimAttempt[];
  pix: { endToEndId: string; txid: string; valor: string; horario: string }[];
}

const problem = (status: number, title: string, detail?: string): SimAnswer => ({
  status,
  body: { type: `https://pix.bcb.gov.br/api/v2/error/${title}`, title, status, detail },
});

export class RecSimState {
  readonly locs = new Map<number, SimLocRec>();
  readonly recs = new Map<string, SimRec>();
  readonly cobrs = new Map<string, SimCobr>();
  readonly solicitacoes = new Map<
    string,
    { idSolicRec: string; idRec: string; status: string; body: unknown; atualizacao: { status: string; data: string }[] }
  >();
  webhookRec: { webhookUrl: string; criacao: string } | null = null;
  webhookCobr: { webhookUrl: string; criacao: string } | null = null;
  private nextLoc = 1;
  /** Days the simulator's calendar is ahead of the real one (tests move it). */
  dayOffset = 0;

  constructor(
    private readonly pix: PixSimState,
    private readonly o: { ispb: string; merchantName: string; merchantCity: string },
  ) {}

  today(): string {
    return addDays(spDate(new Date()), this.dayOffset);
  }

  private e2e(date: string): string {
    return `E${this.o.ispb}${date.replaceAll('-', '')}${new Date().toISOString().slice(11, 16).replace(':', '')}${alnum(11)}`;
  }

  private now = () => new Date().toISOString();

  createLoc(): SimAnswer {
    const token = randomBytes(16).toString('hex');
    const loc: SimLocRec = { id: this.nextLoc++, token, location: `${new URL(this.pix.baseUrl).host}/qr/v2/rec/${token}`, criacao: this.now() };
    this.locs.set(loc.id, loc);
    return { status: 201, body: { id: loc.id, location: loc.location, criacao: loc.criacao } };
  }

  createRec(b: Record<string, unknown> | null): SimAnswer {
    const bad = (d: string) => problem(400, 'RecOperacaoInvalida', d);
    if (!b) return bad('body is not JSON');
    const v = b.vinculo as SimRec['vinculo'] | undefined;
    const dev = v?.devedor;
    if (!v?.contrato || typeof v.contrato !== 'string' || v.contrato.length > 35) return bad('vinculo.contrato is required (up to 35 characters)');
    if (!dev || typeof dev.nome !== 'string' || !dev.nome || dev.nome.length > 140) return bad('vinculo.devedor.nome is required (up to 140 characters)');
    if (!!dev.cpf === !!dev.cnpj) return bad('vinculo.devedor takes a cpf or a cnpj');
    if (dev.cpf && !/^\d{11}$/.test(dev.cpf)) return bad('vinculo.devedor.cpf must be 11 digits');
    if (dev.cnpj && !/^[0-9A-Z]{14}$/.test(dev.cnpj)) return bad('vinculo.devedor.cnpj must be 14 characters [0-9A-Z]');
    const cal = b.calendario as SimRec['calendario'] | undefined;
    if (!cal || !DATE_RE.test(cal.dataInicial ?? '')) return bad('calendario.dataInicial must be YYYY-MM-DD');
    if (!['SEMANAL', 'MENSAL', 'TRIMESTRAL', 'SEMESTRAL', 'ANUAL'].includes(cal.periodicidade)) return bad('calendario.periodicidade is not valid');
    if (cal.dataInicial < this.today()) return bad('calendario.dataInicial is in the past');
    const valor = (b.valor ?? {}) as SimRec['valor'];
    if (valor.valorRec && valor.valorMinimoRecebedor) return bad('valor.valorRec and valor.valorMinimoRecebedor exclude each other');
    for (const x of [valor.valorRec, valor.valorMinimoRecebedor]) if (x !== undefined && !VALOR_RE.test(x)) return bad('valor must look like "123.45"');
    const policy = b.politicaRetentativa as Policy;
    if (policy !== 'NAO_PERMITE' && policy !== 'PERMITE_3R_7D') return bad('politicaRetentativa is required');
    let loc: SimLocRec | undefined;
    if (b.loc !== undefined) {
      loc = this.locs.get(Number(b.loc));
      if (!loc) return bad('loc does not exist');
      if (loc.idRec) return bad('loc is bound to another recurrence');
    }
    const firstTxid = (b.ativacao as { dadosJornada?: { txid?: string } } | undefined)?.dadosJornada?.txid;
    if (firstTxid !== undefined && !this.pix.cobs.has(firstTxid)) return bad('ativacao.dadosJornada.txid is not a charge (cob) of this receiver');
    const d = this.today().replaceAll('-', '');
    const idRec = `R${policy === 'PERMITE_3R_7D' ? 'R' : 'N'}${this.o.ispb}${d}${alnum(11)}`;
    const rec: SimRec = {
      idRec,
      status: 'CRIADA',
      vinculo: { objeto: v.objeto, contrato: v.contrato, devedor: dev },
      calendario: { dataInicial: cal.dataInicial, dataFinal: cal.dataFinal, periodicidade: cal.periodicidade },
      valor,
      politicaRetentativa: policy,
      loc,
      firstTxid,
      tipoJornada: 'AGUARDANDO_DEFINICAO',
      atualizacao: [{ status: 'CRIADA', data: this.now() }],
      failNext: 0,
    };
    if (loc) loc.idRec = idRec;
    this.recs.set(idRec, rec);
    return { status: 201, body: this.recJson(rec) };
  }

  recJson(r: SimRec, txid?: string) {
    let dadosQR: { jornada: string; pixCopiaECola: string } | undefined;
    if (r.loc && r.status === 'CRIADA') {
      const cob = txid ? this.pix.cobs.get(txid) : undefined;
      const names = { merchantName: this.o.merchantName, merchantCity: this.o.merchantCity };
      dadosQR = cob
        ? { jornada: 'JORNADA_3', pixCopiaECola: buildRecurrenceBrCode({ ...names, recLocation: r.loc.location, cobBrCode: cob.pixCopiaECola }) }
        : { jornada: 'JORNADA_2', pixCopiaECola: buildRecurrenceBrCode({ ...names, recLocation: r.loc.location }) };
    }
    return {
      idRec: r.idRec,
      vinculo: r.vinculo,
      calendario: r.calendario,
      valor: r.valor,
      politicaRetentativa: r.politicaRetentativa,
      recebedor: { cnpj: '00000000000191', nome: this.o.merchantName },
      status: r.status,
      ...(r.loc ? { loc: { id: r.loc.id, location: r.loc.location, criacao: r.loc.criacao, idRec: r.idRec } } : {}),
      ...(r.pagador ? { pagador: r.pagador } : {}),
      ativacao: { tipoJornada: r.tipoJornada, ...(r.firstTxid ? { dadosJornada: { txid: r.firstTxid } } : {}) },
      atualizacao: r.atualizacao,
      ...(r.encerramento ? { encerramento: r.encerramento } : {}),
      ...(dadosQR ? { dadosQR } : {}),
    };
  }

  /** PATCH /rec/{idRec} {status: CANCELADA} by the receiver, or the payer's cancellation (/sim/…/cancelar). */
  cancelRec(r: SimRec, by: 'USUARIO_RECEBEDOR' | 'USUARIO_PAGADOR'): SimAnswer {
    if (r.status === 'CANCELADA' || r.status === 'REJEITADA' || r.status === 'EXPIRADA')
      return problem(400, 'RecOperacaoInvalida', `recurrence is ${r.status}`);
    r.status = 'CANCELADA';
    r.atualizacao.push({ status: 'CANCELADA', data: this.now() });
    r.encerramento = {
      cancelamento:
        by === 'USUARIO_PAGADOR'
          ? { solicitante: by, codigo: 'SLDB', descricao: 'Cancelamento solicitado pelo usuário pagador' }
          : { solicitante: by, codigo: 'SLCR', descricao: 'Cancelamento solicitado pelo usuário recebedor' },
    };
    const ended: SimCobr[] = [];
    for (const c of this.cobrs.values()) {
      if (c.idRec !== r.idRec || (c.status !== 'ATIVA' && c.status !== 'CRIADA')) continue;
      this.endCobr(c, 'CANCELADA', { cancelamento: { solicitante: by, codigo: 'CCLD', descricao: 'Recorrência cancelada' } });
      ended.push(c);
    }
    setImmediate(() => void this.notifyRec([r]).then(() => (ended.length ? this.notifyCobr(ended) : undefined)));
    return { status: 200, body: this.recJson(r) };
  }

  /** The payer authorizes at their bank (QR read or push accepted). */
  async authorize(idRec: string, b: { valorMaximo?: string; cpf?: string; cnpj?: string }): Promise<SimAnswer> {
    const r = this.recs.get(idRec);
    if (!r) return problem(404, 'NaoEncontrado');
    if (r.status !== 'CRIADA') return problem(409, 'RecOperacaoInvalida', `recurrence is ${r.status}`);
    const floor = r.valor.valorMinimoRecebedor ? fromValor(r.valor.valorMinimoRecebedor) : 0n;
    let max: bigint | undefined;
    if (b.valorMaximo !== undefined) {
      if (!VALOR_RE.test(b.valorMaximo)) return problem(400, 'RequisicaoInvalida', 'valorMaximo must look like "123.45"');
      max = fromValor(b.valorMaximo);
      if (max < floor) return problem(409, 'RecOperacaoInvalida', `the payer's maximum may not be below valorMinimoRecebedor ${r.valor.valorMinimoRecebedor}`);
    }
    if (r.firstTxid) {
      const paid = await this.pix.pay(r.firstTxid);
      if (paid.status !== 200) return paid;
    }
    r.status = 'APROVADA';
    r.payerMax = max;
    r.tipoJornada = r.firstTxid ? 'JORNADA_3' : [...this.solicitacoes.values()].some((s) => s.idRec === idRec) ? 'JORNADA_1' : 'JORNADA_2';
    const d = r.vinculo.devedor;
    r.pagador = { ...(b.cnpj || d.cnpj ? { cnpj: b.cnpj ?? d.cnpj } : { cpf: b.cpf ?? d.cpf }), ispbParticipante: '99999999' };
    r.atualizacao.push({ status: 'APROVADA', data: this.now() });
    for (const s of this.solicitacoes.values()) if (s.idRec === idRec) s.status = 'ACEITA';
    const delivered = await this.notifyRec([r]);
    return { status: 200, body: { idRec, status: r.status, delivered } };
  }

  createSolic(b: Record<string, unknown> | null): SimAnswer {
    const bad = (d: string) => problem(400, 'SolicRecOperacaoInvalida', d);
    if (!b) return bad('body is not JSON');
    const r = this.recs.get(String(b.idRec ?? ''));
    if (!r) return bad('idRec does not exist');
    if (r.status !== 'CRIADA') return bad(`recurrence is ${r.status}`);
    const exp = (b.calendario as { dataExpiracaoSolicitacao?: string } | undefined)?.dataExpiracaoSolicitacao;
    if (!exp || Number.isNaN(Date.parse(exp))) return bad('calendario.dataExpiracaoSolicitacao must be a date-time');
    const dest = b.destinatario as { conta?: string; ispbParticipante?: string; cpf?: string; cnpj?: string } | undefined;
    if (!dest?.conta || !/^[0-9A-Z]{8}$/.test(dest.ispbParticipante ?? '') || !!dest.cpf === !!dest.cnpj)
      return bad('destinatario needs conta, ispbParticipante and a cpf or cnpj');
    const idSolicRec = `SC${this.o.ispb}${this.today().replaceAll('-', '')}${alnum(11)}`;
    const s = {
      idSolicRec,
      idRec: r.idRec,
      status: 'ENVIADA',
      body: b,
      atualizacao: [
        { status: 'CRIADA', data: this.now() },
        { status: 'ENVIADA', data: this.now() },
      ],
    };
    this.solicitacoes.set(idSolicRec, s);
    return { status: 201, body: this.solicJson(s) };
  }

  solicJson(s: { idSolicRec: string; idRec: string; status: string; body: unknown; atualizacao: unknown[] }) {
    const b = s.body as Record<string, unknown>;
    return { idSolicRec: s.idSolicRec, idRec: s.idRec, calendario: b.calendario, destinatario: b.destinatario, status: s.status, atualizacao: s.atualizacao };
  }

  createCobr(txid: string, b: Record<string, unknown> | null): SimAnswer {
    const bad = (d: string) => problem(400, 'CobROperacaoInvalida', d);
    if (!TXID_RE.test(txid)) return bad('txid must match [a-zA-Z0-9]{26,35}');
    if (this.cobrs.has(txid) || this.pix.cobs.has(txid)) return bad('txid already used');
    if (!b) return bad('body is not JSON');
    const r = this.recs.get(String(b.idRec ?? ''));
    if (!r) return bad('idRec does not exist');
    if (r.status !== 'APROVADA') return bad(`recurrence is ${r.status}`);
    const due = (b.calendario as { dataDeVencimento?: string } | undefined)?.dataDeVencimento ?? '';
    if (!DATE_RE.test(due)) return bad('calendario.dataDeVencimento must be YYYY-MM-DD');
    const lead = daysBetween(this.today(), due);
    if (lead < 2 || lead > 10) return bad(`a recurring charge is sent 2 to 10 days before its due date (${due} is ${lead} days away)`);
    const original = (b.valor as { original?: string } | undefined)?.original ?? '';
    if (!VALOR_RE.test(original) || fromValor(original) <= 0n) return bad('valor.original must look like "123.45"');
    if (r.valor.valorRec && original !== r.valor.valorRec) return bad('a fixed-amount recurrence charges valorRec');
    const rc = b.recebedor as { agencia?: string; conta?: string; tipoConta?: string } | undefined;
    if (!rc?.conta || !['CORRENTE', 'POUPANCA', 'PAGAMENTO'].includes(rc.tipoConta ?? '') || (rc.agencia !== undefined && rc.agencia.length > 4))
      return bad('recebedor needs conta and tipoConta (CORRENTE, POUPANCA or PAGAMENTO); agencia up to 4 characters');
    if ([...this.cobrs.values()].some((c) => c.idRec === r.idRec && c.status === 'ATIVA' && c.calendario.dataDeVencimento === due))
      return bad('the recurrence has an open charge due that day');
    const now = this.now();
    const c: SimCobr = {
      idRec: r.idRec,
      txid,
      infoAdicional: typeof b.infoAdicional === 'string' ? b.infoAdicional.slice(0, 140) : undefined,
      calendario: { criacao: this.today(), dataDeVencimento: due },
      valor: { original },
      status: 'ATIVA',
      politicaRetentativa: r.politicaRetentativa,
      ajusteDiaUtil: b.ajusteDiaUtil !== false,
      recebedor: { agencia: rc.agencia, conta: rc.conta, tipoConta: rc.tipoConta! },
      atualizacao: [
        { status: 'CRIADA', data: now },
        { status: 'ATIVA', data: now },
      ],
      tentativas: [{ dataLiquidacao: due, tipo: 'AGND', status: 'AGENDADA', endToEndId: this.e2e(due), atualizacao: [{ status: 'AGENDADA', data: now }] }],
      pix: [],
    };
    this.cobrs.set(txid, c);
    setImmediate(() => void this.notifyCobr([c]));
    return { status: 201, body: this.cobrJson(c) };
  }

  cobrJson(c: SimCobr) {
    const { pix, ...rest } = c;
    return { ...rest, ...(pix.length ? { pix } : {}) };
  }

  private endCobr(c: SimCobr, status: CobrStatus, encerramento?: SimCobr['encerramento']) {
    c.status = status;
    c.atualizacao.push({ status, data: this.now() });
    if (encerramento) c.encerramento = encerramento;
    for (const t of c.tentativas) {
      if (t.status === 'AGENDADA' || t.status === 'SOLICITADA') {
        t.status = status === 'EXPIRADA' ? 'EXPIRADA' : 'CANCELADA';
        t.atualizacao.push({ status: t.status, data: this.now() });
      }
    }
  }

  private openAttempt(c: SimCobr): SimAttempt | undefined {
    return c.tentativas.find((t) => t.status === 'AGENDADA' || t.status === 'SOLICITADA');
  }

  /** POST /cobr/{txid}/retentativa/{data}: PERMITE_3R_7D allows 3 retries within 7 days after the due date. */
  retry(c: SimCobr, date: string): SimAnswer {
    const bad = (d: string) => problem(400, 'CobROperacaoInvalida', d);
    if (!DATE_RE.test(date)) return bad('data must be YYYY-MM-DD');
    if (c.politicaRetentativa !== 'PERMITE_3R_7D') return bad('the recurrence does not allow retries (NAO_PERMITE)');
    if (c.status !== 'ATIVA') return bad(`charge is ${c.status}`);
    if (this.openAttempt(c)) return bad('the charge has an attempt scheduled');
    const last = c.tentativas.at(-1);
    if (last?.status !== 'REJEITADA') return bad('only a rejected attempt may be retried');
    if (c.tentativas.filter((t) => t.tipo === 'NTAG').length >= 3) return bad('3 retries already');
    if (date <= this.today()) return bad('a retry is scheduled for a later day');
    if (daysBetween(c.calendario.dataDeVencimento, date) > 7) return bad('retries end 7 days after the due date');
    c.tentativas.push({
      dataLiquidacao: date,
      tipo: 'NTAG',
      status: 'AGENDADA',
      endToEndId: this.e2e(date),
      atualizacao: [{ status: 'AGENDADA', data: this.now() }],
    });
    setImmediate(() => void this.notifyCobr([c]));
    return { status: 201, body: this.cobrJson(c) };
  }

  cancelCobr(c: SimCobr): SimAnswer {
    if (c.status !== 'ATIVA' && c.status !== 'CRIADA') return problem(400, 'CobROperacaoInvalida', `charge is ${c.status}`);
    this.endCobr(c, 'CANCELADA', { cancelamento: { solicitante: 'USUARIO_RECEBEDOR', codigo: 'SLCR', descricao: 'Cancelada pelo recebedor' } });
    setImmediate(() => void this.notifyCobr([c]));
    return { status: 200, body: this.cobrJson(c) };
  }

  /** The current attempt settles (the payer's bank debits them) or is rejected, then the callback. */
  async settle(txid: string, outcome: 'pay' | { codigo: string; descricao: string }): Promise<SimAnswer> {
    const c = this.cobrs.get(txid);
    if (!c) return problem(404, 'NaoEncontrado');
    const t = this.openAttempt(c);
    if (c.status !== 'ATIVA' || !t) return problem(409, 'CobROperacaoInvalida', `charge is ${c.status}${t ? '' : ', no attempt scheduled'}`);
    const now = this.now();
    if (outcome === 'pay') {
      t.status = 'PAGA';
      t.atualizacao.push({ status: 'PAGA', data: now });
      c.pix.push({ endToEndId: t.endToEndId, txid, valor: c.valor.original, horario: now });
      c.status = 'CONCLUIDA';
      c.atualizacao.push({ status: 'CONCLUIDA', data: now });
    } else {
      t.status = 'REJEITADA';
      t.rejeicao = outcome;
      t.atualizacao.push({ status: 'REJEITADA', data: now });
      const retries = c.tentativas.filter((x) => x.tipo === 'NTAG').length;
      const canRetry = c.politicaRetentativa === 'PERMITE_3R_7D' && retries < 3 && daysBetween(c.calendario.dataDeVencimento, this.today()) < 7;
      if (!canRetry) this.endCobr(c, 'REJEITADA', { rejeicao: outcome });
    }
    const delivered = await this.notifyCobr([c]);
    return { status: 200, body: { txid, status: c.status, endToEndId: t.endToEndId, valor: c.valor.original, delivered } };
  }

  /** Every attempt due on or before `date` settles as its payer allows; charges past their retries expire. */
  async settleDue(date = this.today()): Promise<{ paid: string[]; rejected: string[]; expired: string[] }> {
    const out = { paid: [] as string[], rejected: [] as string[], expired: [] as string[] };
    for (const c of [...this.cobrs.values()]) {
      if (c.status !== 'ATIVA') continue;
      const t = this.openAttempt(c);
      if (!t) {
        if (daysBetween(c.calendario.dataDeVencimento, date) > 7) {
          this.endCobr(c, 'EXPIRADA');
          await this.notifyCobr([c]);
          out.expired.push(c.txid);
        }
        continue;
      }
      if (t.dataLiquidacao > date) continue;
      const r = this.recs.get(c.idRec)!;
      const amount = fromValor(c.valor.original);
      if (r.failNext > 0) {
        r.failNext--;
        await this.settle(c.txid, { codigo: 'AM02', descricao: 'Saldo insuficiente na conta do pagador (simulado)' });
        out.rejected.push(c.txid);
      } else if (r.payerMax !== undefined && amount > r.payerMax) {
        await this.settle(c.txid, { codigo: 'AM02', descricao: `Valor acima do limite do pagador (${toValor(r.payerMax)})` });
        out.rejected.push(c.txid);
      } else {
        await this.settle(c.txid, 'pay');
        out.paid.push(c.txid);
      }
    }
    return out;
  }

  async notifyRec(recs: SimRec[]): Promise<boolean> {
    if (!this.webhookRec) return false;
    const body = {
      recs: recs.map((r) => ({
        idRec: r.idRec,
        status: r.status,
        atualizacao: r.atualizacao,
        ...(r.encerramento ? { encerramento: r.encerramento } : {}),
        ativacao: { tipoJornada: r.tipoJornada },
      })),
    };
    return this.post(`${this.webhookRec.webhookUrl.replace(/\/+$/, '')}/rec`, body);
  }

  async notifyCobr(cobrs: SimCobr[]): Promise<boolean> {
    if (!this.webhookCobr) return false;
    const body = {
      cobsr: cobrs.map((c) => ({
        idRec: c.idRec,
        txid: c.txid,
        status: c.status,
        atualizacao: c.atualizacao,
        tentativas: c.tentativas.map(({ atualizacao: _a, ...t }) => t),
        ...(c.pix.length ? { pix: c.pix } : {}),
      })),
    };
    return this.post(`${this.webhookCobr.webhookUrl.replace(/\/+$/, '')}/cobr`, body);
  }

  private async post(target: string, body: unknown): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const res = await httpRequest(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        if (res.status >= 200 && res.status < 300) return true;
        log.warn('webhook delivery refused', { status: res.status, attempt });
      } catch (err) {
        log.warn('webhook delivery failed', { err, attempt });
      }
      await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
    }
    return false;
  }
}

function json(raw: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(raw);
    return v && typeof v === 'object' && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

function seg(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

/** Development endpoints (HTTP Basic checked by the caller). null: not one of these paths. */
export async function recSimRoute(st: RecSimState, method: string, path: string, raw: string): Promise<SimAnswer | null> {
  let m: RegExpExecArray | null;
  if (method !== 'POST') return null;
  const body = raw ? json(raw) : {};
  if (!body) return problem(400, 'RequisicaoInvalida', 'body is not JSON');
  if ((m = /^\/sim\/rec\/([^/]+)\/(autorizar|cancelar)$/.exec(path))) {
    const id = seg(m[1]);
    if (id === null) return problem(400, 'RequisicaoInvalida', 'malformed idRec');
    if (m[2] === 'autorizar') return st.authorize(id, body as { valorMaximo?: string });
    const r = st.recs.get(id);
    return r ? st.cancelRec(r, 'USUARIO_PAGADOR') : problem(404, 'NaoEncontrado');
  }
  if ((m = /^\/sim\/cobr\/([^/]+)\/(pagar|falhar)$/.exec(path))) {
    const txid = seg(m[1]);
    if (txid === null) return problem(400, 'RequisicaoInvalida', 'malformed txid');
    if (m[2] === 'pagar') return st.settle(txid, 'pay');
    const codigo = typeof body.codigo === 'string' && /^[A-Z0-9]{4}$/.test(body.codigo) ? body.codigo : 'AM02';
    return st.settle(txid, { codigo, descricao: 'Pagamento rejeitado pelo PSP do pagador (simulado)' });
  }
  if (path === '/sim/liquidar') {
    const data = body.data === undefined ? undefined : String(body.data);
    if (data !== undefined && !DATE_RE.test(data)) return problem(400, 'RequisicaoInvalida', 'data must be YYYY-MM-DD');
    return { status: 200, body: await st.settleDue(data) };
  }
  if (path === '/sim/relogio') {
    const data = String(body.data ?? '');
    if (!DATE_RE.test(data)) return problem(400, 'RequisicaoInvalida', 'data must be YYYY-MM-DD');
    st.dayOffset += daysBetween(st.today(), data);
    return { status: 200, body: { data: st.today() } };
  }
  if ((m = /^\/sim\/pagador\/([^/]+)\/falhas$/.exec(path))) {
    const r = st.recs.get(seg(m[1]) ?? '');
    if (!r) return problem(404, 'NaoEncontrado');
    const n = Number(body.n);
    if (!Number.isInteger(n) || n < 0 || n > 100) return problem(400, 'RequisicaoInvalida', 'n is 0 to 100');
    r.failNext = n;
    return { status: 200, body: { idRec: r.idRec, falhas: n } };
  }
  return null;
}

/** The API Pix recurrence routes (token checked by the caller). null: not one of these paths. */
export function recApiRoute(st: RecSimState, method: string, path: string, query: URLSearchParams, raw: string): SimAnswer | null {
  let m: RegExpExecArray | null;
  const body = () => json(raw);
  if (path === '/locrec' && method === 'POST') {
    const b = body();
    return b?.tipo === 'rec' ? st.createLoc() : problem(400, 'PayloadLocationRecOperacaoInvalida', 'tipo must be "rec"');
  }
  if ((m = /^\/locrec\/(\d+)$/.exec(path)) && method === 'GET') {
    const l = st.locs.get(Number(m[1]));
    return l
      ? { status: 200, body: { id: l.id, location: l.location, criacao: l.criacao, ...(l.idRec ? { idRec: l.idRec } : {}) } }
      : problem(404, 'NaoEncontrado');
  }
  if (path === '/rec' && method === 'POST') return st.createRec(body());
  if ((m = /^\/rec\/([^/]+)$/.exec(path))) {
    const id = seg(m[1]);
    if (id === null || !REC_ID_RE.test(id)) return problem(400, 'RecOperacaoInvalida', 'malformed idRec');
    const r = st.recs.get(id);
    if (!r) return problem(404, 'NaoEncontrado');
    if (method === 'GET') return { status: 200, body: st.recJson(r, query.get('txid') ?? undefined) };
    if (method === 'PATCH') {
      const b = body();
      if (b?.status !== 'CANCELADA') return problem(400, 'RecOperacaoInvalida', 'only status CANCELADA may be set here');
      return st.cancelRec(r, 'USUARIO_RECEBEDOR');
    }
    return problem(404, 'NaoEncontrado');
  }
  if (path === '/solicrec' && method === 'POST') return st.createSolic(body());
  if ((m = /^\/solicrec\/([^/]+)$/.exec(path)) && method === 'GET') {
    const s = st.solicitacoes.get(seg(m[1]) ?? '');
    return s ? { status: 200, body: st.solicJson(s) } : problem(404, 'NaoEncontrado');
  }
  if ((m = /^\/cobr\/([^/]+)\/retentativa\/([^/]+)$/.exec(path)) && method === 'POST') {
    const c = st.cobrs.get(seg(m[1]) ?? '');
    return c ? st.retry(c, seg(m[2]) ?? '') : problem(404, 'NaoEncontrado');
  }
  if ((m = /^\/cobr\/([^/]+)$/.exec(path))) {
    const txid = seg(m[1]);
    if (txid === null) return problem(400, 'CobROperacaoInvalida', 'malformed txid');
    if (method === 'PUT') return st.createCobr(txid, body());
    const c = st.cobrs.get(txid);
    if (!c) return problem(404, 'NaoEncontrado');
    if (method === 'GET') return { status: 200, body: st.cobrJson(c) };
    if (method === 'PATCH')
      return body()?.status === 'CANCELADA' ? st.cancelCobr(c) : problem(400, 'CobROperacaoInvalida', 'only status CANCELADA may be set here');
    return problem(404, 'NaoEncontrado');
  }
  if (path === '/webhookrec' || path === '/webhookcobr') {
    const key = path === '/webhookrec' ? 'webhookRec' : 'webhookCobr';
    if (method === 'PUT') {
      const url = body()?.webhookUrl;
      try {
        new URL(String(url ?? ''));
      } catch {
        return problem(400, 'WebhookOperacaoInvalida', 'webhookUrl must be a URL');
      }
      st[key] = { webhookUrl: String(url), criacao: new Date().toISOString() };
      return { status: 204, body: undefined };
    }
    if (method === 'GET') return st[key] ? { status: 200, body: st[key] } : problem(404, 'NaoEncontrado');
    if (method === 'DELETE') {
      st[key] = null;
      return { status: 204, body: undefined };
    }
  }
  return null;
}
