import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { buildDynamicBrCode } from './brcode.ts';
import { fromValor, toValor } from './amount.ts';
import { httpRequest, type TlsOptions } from './http.ts';
import {
  PspError,
  type CobStatus,
  type PixCharge,
  type PixPayment,
  type PixRefund,
  type PspAdapter,
  type WebhookRequest,
  type WebhookVerification,
} from './types.ts';

// Adapter for the Banco Central's standard API Pix (bacen/pix-api), which Efí, Banco do Brasil,
// Itaú, Sicoob and others implement. The built-in simulator speaks the same endpoints, so the
// embedded default runs exactly this code.
//
// Authentication towards the PSP: OAuth2 client credentials (HTTP Basic client_id:client_secret,
// grant_type=client_credentials) at `oauthUrl`, then `Authorization: Bearer`; production PSPs also
// require mTLS with the certificate they issue (`tls`).
//
// Authentication of the PSP's callbacks: the BCB standard has the PSP call us over mTLS; terminate
// it at the reverse proxy (require the PSP's CA, forward only verified requests). On top of that,
// and as the only check for the simulator, the registered webhook URL carries a per-installation
// secret in its path (…/webhooks/pix/<secret>; the PSP appends /pix), compared in constant time.

export const TXID_RE = /^[a-zA-Z0-9]{26,35}$/;
const REFUND_ID_RE = /^[a-zA-Z0-9]{1,35}$/;

const RefundSchema = z.object({
  id: z.string(),
  rtrId: z.string().nullish(),
  valor: z.string(),
  status: z.enum(['EM_PROCESSAMENTO', 'DEVOLVIDO', 'NAO_REALIZADO']),
});

const PixSchema = z.object({
  endToEndId: z.string().regex(/^[a-zA-Z0-9]{32}$/),
  txid: z.string().nullish(),
  valor: z.string(),
  horario: z.string(),
  devolucoes: z.array(RefundSchema).nullish(),
});

const CobSchema = z.object({
  txid: z.string(),
  status: z.enum(['ATIVA', 'CONCLUIDA', 'REMOVIDA_PELO_USUARIO_RECEBEDOR', 'REMOVIDA_PELO_PSP']),
  calendario: z.object({ criacao: z.string(), expiracao: z.coerce.number().int() }),
  valor: z.object({ original: z.string() }),
  location: z.string().nullish(),
  loc: z.object({ location: z.string().nullish() }).partial().nullish(),
  pixCopiaECola: z.string().nullish(),
  pix: z.array(PixSchema).nullish(),
});

export const WebhookBodySchema = z.object({ pix: z.array(PixSchema).min(1) });

function toRefund(r: z.infer<typeof RefundSchema>): PixRefund {
  return { id: r.id, rtrId: r.rtrId ?? null, amountMicros: fromValor(r.valor), status: r.status };
}

export function toPayment(p: z.infer<typeof PixSchema>): PixPayment {
  return {
    endToEndId: p.endToEndId,
    txid: p.txid ?? null,
    valor: p.valor,
    amountMicros: fromValor(p.valor),
    horario: p.horario,
    devolucoes: (p.devolucoes ?? []).map(toRefund),
  };
}

export function secretsEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

export interface BcbAdapterOptions {
  /** Base of the API Pix, e.g. https://pix.example-psp.com.br/v2 (no trailing slash). */
  baseUrl: string;
  /** OAuth2 token endpoint; defaults to `${baseUrl}/oauth/token`. */
  oauthUrl?: string;
  clientId: string;
  clientSecret: string;
  /** Our Pix key (chave) that receives the charges. */
  chave: string;
  /** Per-installation secret expected in the webhook URL. */
  webhookSecret: string;
  merchantName: string;
  merchantCity: string;
  tls?: TlsOptions;
  name?: string;
}

export class BcbPixAdapter implements PspAdapter {
  readonly name: string;
  private token: { value: string; expiresAt: number } | null = null;

  constructor(private readonly o: BcbAdapterOptions) {
    this.name = o.name ?? 'bcb';
  }

  private async accessToken(): Promise<string> {
    if (this.token && this.token.expiresAt > Date.now() + 10_000) return this.token.value;
    const res = await httpRequest(this.o.oauthUrl ?? `${this.o.baseUrl}/oauth/token`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${Buffer.from(`${this.o.clientId}:${this.o.clientSecret}`).toString('base64')}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: 'grant_type=client_credentials',
      tls: this.o.tls,
    });
    const j = res.json as { access_token?: string; expires_in?: number } | null;
    if (res.status !== 200 || !j?.access_token) throw new PspError(res.status, `PSP OAuth2 token request failed (HTTP ${res.status})`);
    this.token = { value: j.access_token, expiresAt: Date.now() + (j.expires_in ?? 300) * 1000 };
    return j.access_token;
  }

  /** One authenticated call to the API Pix (the recurrence endpoints use it: src/pix/recurrence.ts). */
  request(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    return this.call(method, path, body);
  }

  /** The per-installation webhook secret check of every callback (…/webhooks/pix/<secret>/…). */
  secretOk(secret: string | null): boolean {
    return !!secret && secretsEqual(secret, this.o.webhookSecret);
  }

  private async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    for (let attempt = 0; ; attempt++) {
      const res = await httpRequest(`${this.o.baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${await this.accessToken()}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
        tls: this.o.tls,
      });
      if (res.status === 401 && attempt === 0) {
        this.token = null; // expired or revoked token: fetch a new one once
        continue;
      }
      return { status: res.status, json: res.json };
    }
  }

  private toCharge(raw: unknown): PixCharge {
    const c = CobSchema.parse(raw);
    const location = c.location ?? c.loc?.location ?? null;
    const brCode =
      c.pixCopiaECola ?? (location ? buildDynamicBrCode({ location, merchantName: this.o.merchantName, merchantCity: this.o.merchantCity }) : null);
    if (!brCode) throw new PspError(502, 'PSP returned a charge without location or pixCopiaECola');
    return {
      txid: c.txid,
      status: c.status as CobStatus,
      amountMicros: fromValor(c.valor.original),
      brCode,
      location,
      createdAt: new Date(c.calendario.criacao),
      expiresInS: c.calendario.expiracao,
      pix: (c.pix ?? []).map(toPayment),
    };
  }

  async createCharge(a: { txid: string; amountMicros: bigint; expiresInS: number; description?: string }): Promise<PixCharge> {
    if (!TXID_RE.test(a.txid)) throw new RangeError('txid must match [a-zA-Z0-9]{26,35}');
    const res = await this.call('PUT', `/cob/${a.txid}`, {
      calendario: { expiracao: a.expiresInS },
      valor: { original: toValor(a.amountMicros) },
      chave: this.o.chave,
      ...(a.description ? { solicitacaoPagador: a.description.slice(0, 140) } : {}),
    });
    if (res.status !== 201 && res.status !== 200) throw new PspError(res.status, `PUT /cob failed (HTTP ${res.status})`, res.json);
    return this.toCharge(res.json);
  }

  async getCharge(txid: string): Promise<PixCharge | null> {
    const res = await this.call('GET', `/cob/${encodeURIComponent(txid)}`);
    if (res.status === 404) return null;
    if (res.status !== 200) throw new PspError(res.status, `GET /cob failed (HTTP ${res.status})`, res.json);
    return this.toCharge(res.json);
  }

  async registerWebhook(webhookUrl: string): Promise<void> {
    const res = await this.call('PUT', `/webhook/${encodeURIComponent(this.o.chave)}`, { webhookUrl });
    if (res.status < 200 || res.status > 204) throw new PspError(res.status, `PUT /webhook failed (HTTP ${res.status})`, res.json);
  }

  verifyWebhook(req: WebhookRequest): WebhookVerification {
    if (!req.secret || !secretsEqual(req.secret, this.o.webhookSecret)) return { ok: false, reason: 'bad_secret' };
    let parsed: unknown;
    try {
      parsed = JSON.parse(req.rawBody.toString('utf8'));
    } catch {
      return { ok: false, reason: 'bad_body', detail: 'not JSON' };
    }
    const body = WebhookBodySchema.safeParse(parsed);
    if (!body.success) return { ok: false, reason: 'bad_body', detail: body.error.issues[0]?.message };
    try {
      return { ok: true, payments: body.data.pix.map(toPayment) };
    } catch (err) {
      return { ok: false, reason: 'bad_body', detail: (err as Error).message };
    }
  }

  async refund(a: { endToEndId: string; refundId: string; amountMicros: bigint; description?: string }): Promise<PixRefund> {
    if (!REFUND_ID_RE.test(a.refundId)) throw new RangeError('refund id must match [a-zA-Z0-9]{1,35}');
    const res = await this.call('PUT', `/pix/${encodeURIComponent(a.endToEndId)}/devolucao/${a.refundId}`, {
      valor: toValor(a.amountMicros),
      ...(a.description ? { descricao: a.description.slice(0, 140) } : {}),
    });
    if (res.status !== 201 && res.status !== 200) throw new PspError(res.status, `PUT /devolucao failed (HTTP ${res.status})`, res.json);
    return toRefund(RefundSchema.parse(res.json));
  }
}
