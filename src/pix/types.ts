// The PSP adapter contract. Shapes follow the Banco Central's API Pix (bacen/pix-api); amounts
// cross this interface as bigint micro-BRL and are written as "123.45" strings on the wire.

/** Status of an immediate charge (cob) at the PSP. EXPIRADA is ours: an ATIVA charge past expiry. */
export type CobStatus = 'ATIVA' | 'CONCLUIDA' | 'REMOVIDA_PELO_USUARIO_RECEBEDOR' | 'REMOVIDA_PELO_PSP';
export type ChargeStatus = CobStatus | 'EXPIRADA';

export type RefundStatus = 'EM_PROCESSAMENTO' | 'DEVOLVIDO' | 'NAO_REALIZADO';

export interface PixRefund {
  /** Our id of the devolução ([a-zA-Z0-9]{1,35}). */
  id: string;
  rtrId: string | null;
  amountMicros: bigint;
  status: RefundStatus;
}

/** One Pix received (element of `pix[]` in GET /cob and in the webhook callback). */
export interface PixPayment {
  endToEndId: string;
  txid: string | null;
  /** Exactly as received, e.g. "50.00". */
  valor: string;
  amountMicros: bigint;
  horario: string;
  devolucoes: PixRefund[];
}

export interface PixCharge {
  txid: string;
  status: CobStatus;
  amountMicros: bigint;
  /** The "Pix copia e cola" BR Code payload. */
  brCode: string;
  location: string | null;
  createdAt: Date;
  expiresInS: number;
  pix: PixPayment[];
}

export type WebhookVerification = { ok: true; payments: PixPayment[] } | { ok: false; reason: 'bad_secret' | 'bad_body'; detail?: string };

export interface WebhookRequest {
  /** Secret carried by the callback URL (…/webhooks/pix/<secret>/pix). */
  secret: string | null;
  headers: Record<string, string | string[] | undefined>;
  rawBody: Buffer;
}

export interface PspAdapter {
  readonly name: string;
  /** PUT /cob/{txid}. */
  createCharge(a: { txid: string; amountMicros: bigint; expiresInS: number; description?: string }): Promise<PixCharge>;
  /** GET /cob/{txid}; null when the PSP does not know it. */
  getCharge(txid: string): Promise<PixCharge | null>;
  /** PUT /webhook/{chave}. */
  registerWebhook(webhookUrl: string): Promise<void>;
  /** Authenticates a callback and parses `{"pix":[…]}`. */
  verifyWebhook(req: WebhookRequest): WebhookVerification;
  /** PUT /pix/{e2eid}/devolucao/{id}. */
  refund(a: { endToEndId: string; refundId: string; amountMicros: bigint; description?: string }): Promise<PixRefund>;
}

export class PspError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly body?: unknown,
  ) {
    super(message);
    this.name = 'PspError';
  }
}
