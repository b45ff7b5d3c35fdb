import { rootCertificates } from 'node:tls';
import { gunzipSync, gzipSync } from 'node:zlib';
import { Agent, request } from 'undici';
import type { A1Certificate } from './certificate.ts';

// The client of Sefin Nacional's API (the national NFS-e issuing service), over mTLS with the
// operator's A1 certificate:
//   POST {base}/nfse                  {"dpsXmlGZipB64"} → 201 {chaveAcesso, nfseXmlGZipB64, …}
//   GET  {base}/dps/{idDps}           → {chaveAcesso} of the NFS-e made from that DPS
//   GET  {base}/nfse/{chaveAcesso}    → {nfseXmlGZipB64}
//   POST {base}/nfse/{chave}/eventos  {"pedidoRegistroEventoXmlGZipB64"} → 201 {eventoXmlGZipB64}
// Rejections come as {"erros": [{"Codigo", "Descricao", "Complemento"}]} (some answers say "erro").
// The outcome says whether trying again can help: unavailable (5xx, 429, a timeout, no
// connection) can; a rejection cannot, until something is changed.

export interface SefinError {
  code: string;
  message: string;
  complement?: string;
}

export type SendOutcome =
  | { kind: 'issued'; accessKey: string; nfseXml: Buffer; raw: unknown }
  | { kind: 'rejected'; status: number; errors: SefinError[] }
  | { kind: 'unavailable'; reason: string };

export type EventOutcome =
  | { kind: 'registered'; eventXml: Buffer }
  | { kind: 'rejected'; status: number; errors: SefinError[] }
  | { kind: 'unavailable'; reason: string };

/** E0014: a DPS of this series, number, municipality and CNPJ made an NFS-e already. */
export const DUPLICATE_DPS = 'E0014';

export interface SefinClientOptions {
  /** NFSE_URL: https://sefin.nfse.gov.br/SefinNacional (production), https://sefin.producaorestrita.nfse.gov.br/SefinNacional (restricted production) */
  baseUrl: string;
  cert: Pick<A1Certificate, 'keyPem' | 'certPem' | 'chainPem'>;
  /** NFSE_CA_FILE's certificates, trusted besides the system's */
  ca?: string[];
  timeoutMs?: number;
}

const gz64 = (xml: string) => gzipSync(Buffer.from(xml, 'utf8')).toString('base64');

export class SefinClient {
  private readonly agent: Agent;
  private readonly base: string;

  constructor(o: SefinClientOptions) {
    this.base = o.baseUrl.replace(/\/+$/, '');
    const timeout = o.timeoutMs ?? 30_000;
    this.agent = new Agent({
      connect: {
        cert: [o.cert.certPem, ...o.cert.chainPem].join('\n'),
        key: o.cert.keyPem,
        ...(o.ca && o.ca.length > 0 ? { ca: [...rootCertificates, ...o.ca] } : {}),
        timeout,
      },
      headersTimeout: timeout,
      bodyTimeout: timeout,
    });
  }

  async sendDps(signedXml: string): Promise<SendOutcome> {
    const r = await this.call('POST', '/nfse', { dpsXmlGZipB64: gz64(signedXml) });
    if (r.kind === 'unavailable') return r;
    const b = r.body as Record<string, unknown>;
    if ((r.status === 200 || r.status === 201) && typeof b.chaveAcesso === 'string' && typeof b.nfseXmlGZipB64 === 'string')
      return { kind: 'issued', accessKey: b.chaveAcesso, nfseXml: gunzipSync(Buffer.from(b.nfseXmlGZipB64, 'base64')), raw: b };
    return { kind: 'rejected', status: r.status, errors: errorsOf(b, r.status) };
  }

  /** The access key of the NFS-e made from this DPS, or null when Sefin has none. */
  async accessKeyOfDps(dpsId: string): Promise<{ kind: 'found'; accessKey: string } | { kind: 'none' } | { kind: 'unavailable'; reason: string }> {
    const r = await this.call('GET', `/dps/${encodeURIComponent(dpsId)}`);
    if (r.kind === 'unavailable') return r;
    const b = r.body as Record<string, unknown>;
    if (r.status === 200 && typeof b.chaveAcesso === 'string') return { kind: 'found', accessKey: b.chaveAcesso };
    return { kind: 'none' };
  }

  async fetchNfse(accessKey: string): Promise<{ kind: 'found'; nfseXml: Buffer } | { kind: 'none' } | { kind: 'unavailable'; reason: string }> {
    const r = await this.call('GET', `/nfse/${encodeURIComponent(accessKey)}`);
    if (r.kind === 'unavailable') return r;
    const b = r.body as Record<string, unknown>;
    if (r.status === 200 && typeof b.nfseXmlGZipB64 === 'string') return { kind: 'found', nfseXml: gunzipSync(Buffer.from(b.nfseXmlGZipB64, 'base64')) };
    return { kind: 'none' };
  }

  async sendEvent(accessKey: string, signedXml: string): Promise<EventOutcome> {
    const r = await this.call('POST', `/nfse/${encodeURIComponent(accessKey)}/eventos`, { pedidoRegistroEventoXmlGZipB64: gz64(signedXml) });
    if (r.kind === 'unavailable') return r;
    const b = r.body as Record<string, unknown>;
    if ((r.status === 200 || r.status === 201) && typeof b.eventoXmlGZipB64 === 'string')
      return { kind: 'registered', eventXml: gunzipSync(Buffer.from(b.eventoXmlGZipB64, 'base64')) };
    return { kind: 'rejected', status: r.status, errors: errorsOf(b, r.status) };
  }

  /** One request to the API; its JSON answer, or why there was none. */
  async call(
    method: 'GET' | 'POST',
    path: string,
    json?: unknown,
  ): Promise<{ kind: 'answer'; status: number; body: unknown } | { kind: 'unavailable'; reason: string }> {
    try {
      const res = await request(`${this.base}${path}`, {
        method,
        dispatcher: this.agent,
        headers: json ? { 'content-type': 'application/json', accept: 'application/json' } : { accept: 'application/json' },
        body: json ? JSON.stringify(json) : undefined,
      });
      const text = await res.body.text();
      if (res.statusCode >= 500 || res.statusCode === 429 || res.statusCode === 408)
        return { kind: 'unavailable', reason: `HTTP ${res.statusCode}${text ? `: ${text.slice(0, 200)}` : ''}` };
      let body: unknown = {};
      try {
        body = text ? JSON.parse(text) : {};
      } catch {
        body = { erros: [{ Codigo: `HTTP${res.statusCode}`, Descricao: text.slice(0, 500) }] };
      }
      return { kind: 'answer', status: res.statusCode, body: body ?? {} };
    } catch (err) {
      const e = err as Error & { code?: string };
      return { kind: 'unavailable', reason: `${e.code ?? e.name}: ${e.message}`.slice(0, 300) };
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

function errorsOf(body: Record<string, unknown>, status: number): SefinError[] {
  const list = (body.erros ?? body.erro) as unknown;
  const items = Array.isArray(list) ? list : list && typeof list === 'object' ? [list] : [];
  const out = items.map((e) => {
    const o = e as Record<string, unknown>;
    const str = (...k: string[]) => k.map((x) => o[x]).find((v) => typeof v === 'string') as string | undefined;
    return {
      code: str('Codigo', 'codigo') ?? '',
      message: str('Descricao', 'descricao', 'Mensagem', 'mensagem') ?? '',
      complement: str('Complemento', 'complemento'),
    };
  });
  return out.length > 0 ? out : [{ code: `HTTP${status}`, message: 'Sefin refused the request without an error list' }];
}
