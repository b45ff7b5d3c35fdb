import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createLogger } from '../../log.ts';
import { buildDynamicBrCode } from '../brcode.ts';
import { fromValor, toValor } from '../amount.ts';
import { secretsEqual, TXID_RE } from '../bcb.ts';
import { httpRequest } from '../http.ts';

// A PSP simulator speaking the BCB API Pix endpoints the adapter uses, so the embedded default
// runs the production adapter code path:
//   POST /oauth/token                        OAuth2 client credentials (HTTP Basic)
//   PUT  /cob/{txid}, GET /cob/{txid}        immediate charges
//   PUT  /webhook/{chave}, GET /webhook/{chave}
//   PUT  /pix/{e2eid}/devolucao/{id}         refunds (settled at once, then a callback)
//   GET  /qr/v2/{id}                         the payload a payer's bank would fetch (plain JSON here)
// and one development endpoint standing in for the payer:
//   POST /sim/cob/{txid}/pagar               pays the charge (HTTP Basic with the same client
//                                            credentials) and POSTs {"pix":[…]} to <webhookUrl>/pix
// State is in memory: a restarted simulator forgets its charges (development only).

const log = createLogger('pix-sim');

interface SimCob {
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
  pix: Array<{ endToEndId: string; txid: string; valor: string; horario: string; chave: string; devolucoes: SimRefund[] }>;
}
interface SimRefund {
  id: string;
  rtrId: string;
  valor: string;
  horario: { solicitacao: string; liquidacao?: string };
  status: 'EM_PROCESSAMENTO' | 'DEVOLVIDO' | 'NAO_REALIZADO';
}

export interface PixSimulatorOptions {
  host?: string;
  port?: number;
  clientId: string;
  clientSecret: string;
  /** Our ISPB in generated endToEndIds (8 digits). */
  ispb?: string;
  merchantName?: string;
  merchantCity?: string;
}

export interface PixSimulator {
  url: string;
  /** Pays a charge as a payer would and delivers the webhook; see POST /sim/cob/{txid}/pagar. */
  pay(txid: string, opts?: { valor?: string }): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

function e2eId(ispb: string): string {
  const d = new Date();
  const p = (n: number, l = 2) => String(n).padStart(l, '0');
  const ts = `${d.getUTCFullYear()}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}`;
  const alnum = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const rnd = [...randomBytes(11)].map((b) => alnum[b % alnum.length]).join('');
  return `E${ispb}${ts}${rnd}`;
}

function readBody(req: http.IncomingMessage, limit = 64 * 1024): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export async function startPixSimulator(o: PixSimulatorOptions): Promise<PixSimulator> {
  const cobs = new Map<string, SimCob>();
  const tokens = new Map<string, number>();
  const webhooks = new Map<string, { webhookUrl: string; criacao: string }>();
  const ispb = o.ispb ?? '99999999';
  let baseUrl = '';

  const basicOk = (h: string | undefined) => {
    const m = /^Basic (.+)$/i.exec(h ?? '');
    if (!m) return false;
    const [id, ...rest] = Buffer.from(m[1], 'base64').toString('utf8').split(':');
    return secretsEqual(id, o.clientId) && secretsEqual(rest.join(':'), o.clientSecret);
  };
  const bearerOk = (h: string | undefined) => {
    const m = /^Bearer (.+)$/i.exec(h ?? '');
    const exp = m ? tokens.get(m[1]) : undefined;
    return !!exp && exp > Date.now();
  };
  const cobJson = (c: SimCob) => ({
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
  });

  async function deliver(chave: string, pix: SimCob['pix']): Promise<boolean> {
    const hook = webhooks.get(chave);
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

  async function pay(txid: string, opts: { valor?: string } = {}): Promise<{ status: number; body: unknown }> {
    const c = cobs.get(txid);
    if (!c) return { status: 404, body: { title: 'Cobrança não encontrada', status: 404 } };
    if (c.status !== 'ATIVA') return { status: 409, body: { title: 'Cobrança não está ativa', status: 409, detail: c.status } };
    if (Date.now() > c.criacao.getTime() + c.expiracao * 1000) return { status: 409, body: { title: 'Cobrança expirada', status: 409 } };
    const item = { endToEndId: e2eId(ispb), txid, valor: opts.valor ?? c.original, horario: new Date().toISOString(), chave: c.chave, devolucoes: [] as SimRefund[] };
    c.status = 'CONCLUIDA';
    c.pix.push(item);
    const { devolucoes: _d, ...callback } = item;
    const delivered = await deliver(c.chave, [callback as SimCob['pix'][number]]);
    return { status: 200, body: { endToEndId: item.endToEndId, txid, valor: item.valor, delivered } };
  }

  const server = http.createServer(async (req, res) => {
    const send = (status: number, body: unknown) => {
      const text = JSON.stringify(body);
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    };
    const problem = (status: number, title: string, detail?: string) => send(status, { type: `https://pix.bcb.gov.br/api/v2/error/${title.replace(/\s+/g, '')}`, title, status, detail });
    try {
      const url = new URL(req.url ?? '/', 'http://sim');
      const path = url.pathname.replace(/^\/v2(?=\/)/, '');
      const method = req.method ?? 'GET';
      const raw = method === 'GET' ? '' : await readBody(req);
      let m: RegExpExecArray | null;

      if (method === 'POST' && path === '/oauth/token') {
        if (!basicOk(req.headers.authorization)) return send(401, { error: 'invalid_client' });
        if (new URLSearchParams(raw).get('grant_type') !== 'client_credentials') return send(400, { error: 'unsupported_grant_type' });
        const token = randomBytes(24).toString('hex');
        tokens.set(token, Date.now() + 3600_000);
        return send(200, { access_token: token, token_type: 'Bearer', expires_in: 3600, scope: 'cob.read cob.write pix.read pix.write webhook.read webhook.write' });
      }
      if ((m = /^\/qr\/v2\/([A-Za-z0-9]+)$/.exec(path)) && method === 'GET') {
        const c = [...cobs.values()].find((x) => x.locId === m![1]);
        return c ? send(200, { txid: c.txid, status: c.status, valor: { original: c.original }, chave: c.chave, calendario: { criacao: c.criacao.toISOString(), expiracao: c.expiracao } }) : problem(404, 'NaoEncontrado');
      }
      if ((m = /^\/sim\/cob\/([^/]+)\/pagar$/.exec(path)) && method === 'POST') {
        if (!basicOk(req.headers.authorization)) return send(401, { error: 'invalid_client' });
        let valor: string | undefined;
        if (raw) {
          try {
            valor = (JSON.parse(raw) as { valor?: string }).valor;
          } catch {
            return problem(400, 'RequisicaoInvalida', 'body is not JSON');
          }
        }
        const r = await pay(decodeURIComponent(m[1]), { valor });
        return send(r.status, r.body);
      }

      if (!bearerOk(req.headers.authorization)) return problem(401, 'AcessoNegado');

      if ((m = /^\/cob\/([^/]+)$/.exec(path))) {
        const txid = decodeURIComponent(m[1]);
        if (method === 'GET') {
          const c = cobs.get(txid);
          return c ? send(200, cobJson(c)) : problem(404, 'CobNaoEncontrado');
        }
        if (method === 'PUT') {
          if (!TXID_RE.test(txid)) return problem(400, 'CobOperacaoInvalida', 'txid must match [a-zA-Z0-9]{26,35}');
          if (cobs.has(txid)) return problem(400, 'CobOperacaoInvalida', 'txid already used');
          let b: { calendario?: { expiracao?: number }; valor?: { original?: string }; chave?: string; solicitacaoPagador?: string };
          try {
            b = JSON.parse(raw);
          } catch {
            return problem(400, 'CobOperacaoInvalida', 'body is not JSON');
          }
          try {
            if (!b.valor?.original || fromValor(b.valor.original) <= 0n) throw new Error();
          } catch {
            return problem(400, 'CobOperacaoInvalida', 'valor.original must be like "123.45"');
          }
          if (!b.chave) return problem(400, 'CobOperacaoInvalida', 'chave is required');
          const locId = randomBytes(16).toString('hex');
          const location = `${new URL(baseUrl).host}/qr/v2/${locId}`;
          const c: SimCob = {
            txid,
            status: 'ATIVA',
            criacao: new Date(),
            expiracao: b.calendario?.expiracao ?? 86400,
            original: toValor(fromValor(b.valor.original)),
            chave: b.chave,
            solicitacaoPagador: b.solicitacaoPagador,
            locId,
            location,
            pixCopiaECola: buildDynamicBrCode({ location, merchantName: o.merchantName ?? 'CATRACA SIMULADOR', merchantCity: o.merchantCity ?? 'SAO PAULO' }),
            pix: [],
          };
          cobs.set(txid, c);
          return send(201, cobJson(c));
        }
      }
      if ((m = /^\/webhook\/([^/]+)$/.exec(path))) {
        const chave = decodeURIComponent(m[1]);
        if (method === 'PUT') {
          let b: { webhookUrl?: string };
          try {
            b = JSON.parse(raw);
            new URL(b.webhookUrl ?? '');
          } catch {
            return problem(400, 'WebhookOperacaoInvalida', 'webhookUrl must be a URL');
          }
          webhooks.set(chave, { webhookUrl: b.webhookUrl!, criacao: new Date().toISOString() });
          res.writeHead(204).end();
          return;
        }
        if (method === 'GET') {
          const w = webhooks.get(chave);
          return w ? send(200, { webhookUrl: w.webhookUrl, chave, criacao: w.criacao }) : problem(404, 'WebhookNaoEncontrado');
        }
        if (method === 'DELETE') {
          webhooks.delete(chave);
          res.writeHead(204).end();
          return;
        }
      }
      if ((m = /^\/pix\/([^/]+)\/devolucao\/([^/]+)$/.exec(path))) {
        const e2e = decodeURIComponent(m[1]);
        const id = decodeURIComponent(m[2]);
        const cob = [...cobs.values()].find((c) => c.pix.some((p) => p.endToEndId === e2e));
        const item = cob?.pix.find((p) => p.endToEndId === e2e);
        if (!cob || !item) return problem(404, 'PixNaoEncontrado');
        const existing = item.devolucoes.find((d) => d.id === id);
        if (method === 'GET') return existing ? send(200, existing) : problem(404, 'DevolucaoNaoEncontrada');
        if (method === 'PUT') {
          if (existing) return send(201, existing);
          let b: { valor?: string };
          try {
            b = JSON.parse(raw);
          } catch {
            return problem(400, 'DevolucaoOperacaoInvalida', 'body is not JSON');
          }
          let amount: bigint;
          try {
            amount = fromValor(b.valor ?? '');
          } catch {
            return problem(400, 'DevolucaoOperacaoInvalida', 'valor must be like "123.45"');
          }
          const already = item.devolucoes.reduce((s, d) => s + (d.status === 'NAO_REALIZADO' ? 0n : fromValor(d.valor)), 0n);
          if (amount <= 0n || already + amount > fromValor(item.valor)) return problem(400, 'DevolucaoOperacaoInvalida', 'refund exceeds the payment');
          const now = new Date().toISOString();
          const dev: SimRefund = { id, rtrId: `D${e2e.slice(1, 9)}${e2e.slice(9, 21)}${randomBytes(6).toString('hex').slice(0, 11)}`, valor: toValor(amount), horario: { solicitacao: now, liquidacao: now }, status: 'DEVOLVIDO' };
          item.devolucoes.push(dev);
          // The callback for a refund repeats the payment with its devolucoes (same endToEndId).
          setImmediate(() => void deliver(cob.chave, [item]));
          return send(201, dev);
        }
      }
      return problem(404, 'NaoEncontrado', `${method} ${path}`);
    } catch (err) {
      log.error('simulator error', { err });
      if (!res.headersSent) send(500, { title: 'Erro interno', status: 500 });
    }
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  baseUrl = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${addr.port}`;
  return {
    url: baseUrl,
    pay,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
