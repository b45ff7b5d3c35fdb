import { randomBytes } from 'node:crypto';
import { createLogger } from '../../log.ts';
import { buildDynamicBrCode } from '../brcode.ts';
import { fromValor, toValor } from '../amount.ts';
import { secretsEqual } from '../bcb.ts';
import { httpRequest } from '../http.ts';

// The simulated PSP's memory: charges, OAuth tokens and webhook registrations, and what a payer
// and the PSP do with them (pay, refund, deliver the callback). The HTTP side is routes.ts.

const log = createLogger('pix-sim');

export interface SimCob {
  txid: string;
  status: 'ATIVA' | 'CONCLUIDA' | 'REMOVIDA_PELO_USUARIO_RECEBEDOR' | 'REMOVIDA_PELO_PSP';
  criacao: Date;
  expiracao: number;
  original: string;
  chave: string;
  solicitacaoPagador?: string;
  locId: string;
  location: string;
  pixCopiaECola: string;
  pix: SimPix[];
}
export interface SimPix {
  endToEndId: string;
  txid: string;
  valor: string;
  horario: string;
  chave: string;
  devolucoes: SimRefund[];
}
export interface SimRefund {
  id: string;
  rtrId: string;
  valor: string;
  horario: { solicitacao: string; liquidacao?: string };
  status: 'EM_PROCESSAMENTO' | 'DEVOLVIDO' | 'NAO_REALIZADO';
}

export interface SimSettings {
  clientId: string;
  clientSecret: string;
  /** Our ISPB in generated endToEndIds (8 digits). */
  ispb?: string;
  merchantName?: string;
  merchantCity?: string;
}

export type SimAnswer = { status: number; body: unknown };

function e2eId(ispb: string): string {
  const d = new Date();
  const p = (n: number, l = 2) => String(n).padStart(l, '0');
  const ts = `${d.getUTCFullYear()}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}`;
  const alnum = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const rnd = [...randomBytes(11)].map((b) => alnum[b % alnum.length]).join('');
  return `E${ispb}${ts}${rnd}`;
}

export class PixSimState {
  readonly cobs = new Map<string, SimCob>();
  readonly webhooks = new Map<string, { webhookUrl: string; criacao: string }>();
  private readonly tokens = new Map<string, number>();
  /** set once the server listens: charges' `location` names it */
  baseUrl = '';

  constructor(private readonly o: SimSettings) {}

  clientOk(authorization: string | undefined): boolean {
    const m = /^Basic (.+)$/i.exec(authorization ?? '');
    if (!m) return false;
    const [id, ...rest] = Buffer.from(m[1], 'base64').toString('utf8').split(':');
    return secretsEqual(id, this.o.clientId) && secretsEqual(rest.join(':'), this.o.clientSecret);
  }

  tokenOk(authorization: string | undefined): boolean {
    const m = /^Bearer (.+)$/i.exec(authorization ?? '');
    const exp = m ? this.tokens.get(m[1]) : undefined;
    return !!exp && exp > Date.now();
  }

  issueToken(): string {
    const token = randomBytes(24).toString('hex');
    this.tokens.set(token, Date.now() + 3600_000);
    return token;
  }

  createCob(txid: string, b: { expiracao?: number; original: bigint; chave: string; solicitacaoPagador?: string }): SimCob {
    const locId = randomBytes(16).toString('hex');
    const location = `${new URL(this.baseUrl).host}/qr/v2/${locId}`;
    const c: SimCob = {
      txid,
      status: 'ATIVA',
      criacao: new Date(),
      expiracao: b.expiracao ?? 86400,
      original: toValor(b.original),
      chave: b.chave,
      solicitacaoPagador: b.solicitacaoPagador,
      locId,
      location,
      pixCopiaECola: buildDynamicBrCode({
        location,
        merchantName: this.o.merchantName ?? 'CATRACA SIMULADOR',
        merchantCity: this.o.merchantCity ?? 'SAO PAULO',
      }),
      pix: [],
    };
    this.cobs.set(txid, c);
    return c;
  }

  /** Pays a charge as a payer would and delivers the webhook. */
  async pay(txid: string, opts: { valor?: string } = {}): Promise<SimAnswer> {
    const c = this.cobs.get(txid);
    if (!c) return { status: 404, body: { title: 'Cobrança não encontrada', status: 404 } };
    if (c.status !== 'ATIVA') return { status: 409, body: { title: 'Cobrança não está ativa', status: 409, detail: c.status } };
    if (Date.now() > c.criacao.getTime() + c.expiracao * 1000) return { status: 409, body: { title: 'Cobrança expirada', status: 409 } };
    const item: SimPix = {
      endToEndId: e2eId(this.o.ispb ?? '99999999'),
      txid,
      valor: opts.valor ?? c.original,
      horario: new Date().toISOString(),
      chave: c.chave,
      devolucoes: [],
    };
    c.status = 'CONCLUIDA';
    c.pix.push(item);
    const { devolucoes: _d, ...callback } = item;
    const delivered = await this.deliver(c.chave, [callback as SimPix]);
    return { status: 200, body: { endToEndId: item.endToEndId, txid, valor: item.valor, delivered } };
  }

  /** A refund of (part of) a payment: settled at once, then the callback repeats the payment with its devolucoes. */
  refund(cob: SimCob, item: SimPix, id: string, amount: bigint): SimAnswer {
    const already = item.devolucoes.reduce((s, d) => s + (d.status === 'NAO_REALIZADO' ? 0n : fromValor(d.valor)), 0n);
    if (amount <= 0n || already + amount > fromValor(item.valor)) return { status: 400, body: null };
    const now = new Date().toISOString();
    const e2e = item.endToEndId;
    const dev: SimRefund = {
      id,
      rtrId: `D${e2e.slice(1, 9)}${e2e.slice(9, 21)}${randomBytes(6).toString('hex').slice(0, 11)}`,
      valor: toValor(amount),
      horario: { solicitacao: now, liquidacao: now },
      status: 'DEVOLVIDO',
    };
    item.devolucoes.push(dev);
    setImmediate(() => void this.deliver(cob.chave, [item]));
    return { status: 201, body: dev };
  }

  findPayment(e2e: string): { cob: SimCob; item: SimPix } | null {
    for (const cob of this.cobs.values()) {
      const item = cob.pix.find((p) => p.endToEndId === e2e);
      if (item) return { cob, item };
    }
    return null;
  }

  private async deliver(chave: string, pix: SimPix[]): Promise<boolean> {
    const hook = this.webhooks.get(chave);
    if (!hook) return false;
    const target = hook.webhookUrl.replace(/\/+$/, '') + '/pix';
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const res = await httpRequest(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ pix }) });
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

export function cobJson(c: SimCob) {
  return {
    calendario: { criacao: c.criacao.toISOString(), expiracao: c.expiracao },
    txid: c.txid,
    revisao: 0,
    loc: { id: c.locId, location: c.location, tipoCob: 'cob' },
    location: c.location,
    status: c.status,
    valor: { original: c.original },
    chave: c.chave,
    ...(c.solicitacaoPagador ? { solicitacaoPagador: c.solicitacaoPagador } : {}),
    pixCopiaECola: c.pixCopiaECola,
    ...(c.pix.length ? { pix: c.pix } : {}),
  };
}
