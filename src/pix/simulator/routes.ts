import type http from 'node:http';
import { fromValor } from '../amount.ts';
import { TXID_RE } from '../bcb.ts';
import { type RecSimState, recApiRoute, recSimRoute } from './recurrence.ts';
import { cobJson, type PixSimState } from './state.ts';

// The simulator's HTTP routes (BCB API Pix paths, optionally under /v2), over PixSimState.

export type Reply = { status: number; body?: unknown };

const problem = (status: number, title: string, detail?: string): Reply => ({
  status,
  body: { type: `https://pix.bcb.gov.br/api/v2/error/${title.replace(/\s+/g, '')}`, title, status, detail },
});

function json<T>(raw: string): T | null {
  try {
    return JSON.parse(raw) as T;
  } catch {
    return null;
  }
}

/** A path segment; null when its %-escapes are malformed (answered 400, never a 500). */
function segment(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

export async function route(
  sim: PixSimState,
  method: string,
  path: string,
  headers: http.IncomingHttpHeaders,
  raw: string,
  rec?: RecSimState,
  query: URLSearchParams = new URLSearchParams(),
): Promise<Reply> {
  let m: RegExpExecArray | null;
  if (method === 'POST' && path === '/oauth/token') {
    if (!sim.clientOk(headers.authorization)) return { status: 401, body: { error: 'invalid_client' } };
    if (new URLSearchParams(raw).get('grant_type') !== 'client_credentials') return { status: 400, body: { error: 'unsupported_grant_type' } };
    return {
      status: 200,
      body: {
        access_token: sim.issueToken(),
        token_type: 'Bearer',
        expires_in: 3600,
        scope:
          'cob.read cob.write pix.read pix.write webhook.read webhook.write rec.read rec.write payloadlocationrec.read payloadlocationrec.write solicrec.read solicrec.write cobr.read cobr.write webhookrec.read webhookrec.write webhookcobr.read webhookcobr.write',
      },
    };
  }
  if ((m = /^\/qr\/v2\/([A-Za-z0-9]+)$/.exec(path)) && method === 'GET') {
    const id = m[1];
    const c = [...sim.cobs.values()].find((x) => x.locId === id);
    return c
      ? {
          status: 200,
          body: {
            txid: c.txid,
            status: c.status,
            valor: { original: c.original },
            chave: c.chave,
            calendario: { criacao: c.criacao.toISOString(), expiracao: c.expiracao },
          },
        }
      : problem(404, 'NaoEncontrado');
  }
  if ((m = /^\/qr\/v2\/rec\/([A-Za-z0-9]+)$/.exec(path)) && method === 'GET' && rec) {
    const token = m[1];
    const loc = [...rec.locs.values()].find((l) => l.token === token);
    const r = loc?.idRec ? rec.recs.get(loc.idRec) : undefined;
    return r ? { status: 200, body: rec.recJson(r) } : problem(404, 'NaoEncontrado');
  }
  if (path.startsWith('/sim/') && !path.startsWith('/sim/cob/') && rec) {
    if (!sim.clientOk(headers.authorization)) return { status: 401, body: { error: 'invalid_client' } };
    const r = await recSimRoute(rec, method, path, raw);
    if (r) return r;
  }
  if ((m = /^\/sim\/cob\/([^/]+)\/pagar$/.exec(path)) && method === 'POST') {
    if (!sim.clientOk(headers.authorization)) return { status: 401, body: { error: 'invalid_client' } };
    const txid = segment(m[1]);
    if (txid === null) return problem(400, 'RequisicaoInvalida', 'malformed txid');
    const b = raw ? json<{ valor?: string }>(raw) : {};
    if (!b) return problem(400, 'RequisicaoInvalida', 'body is not JSON');
    return sim.pay(txid, { valor: b.valor });
  }

  if (!sim.tokenOk(headers.authorization)) return problem(401, 'AcessoNegado');

  if (rec) {
    const r = recApiRoute(rec, method, path, query, raw);
    if (r) return r;
  }
  if ((m = /^\/cob\/([^/]+)$/.exec(path))) return cob(sim, method, segment(m[1]), raw);
  if ((m = /^\/webhook\/([^/]+)$/.exec(path))) return webhook(sim, method, segment(m[1]), raw);
  if ((m = /^\/pix\/([^/]+)\/devolucao\/([^/]+)$/.exec(path))) return refund(sim, method, segment(m[1]), segment(m[2]), raw);
  return problem(404, 'NaoEncontrado', `${method} ${path}`);
}

function cob(sim: PixSimState, method: string, txid: string | null, raw: string): Reply {
  if (txid === null) return problem(400, 'CobOperacaoInvalida', 'malformed txid');
  if (method === 'GET') {
    const c = sim.cobs.get(txid);
    return c ? { status: 200, body: cobJson(c) } : problem(404, 'CobNaoEncontrado');
  }
  if (method !== 'PUT') return problem(404, 'NaoEncontrado');
  if (!TXID_RE.test(txid)) return problem(400, 'CobOperacaoInvalida', 'txid must match [a-zA-Z0-9]{26,35}');
  if (sim.cobs.has(txid)) return problem(400, 'CobOperacaoInvalida', 'txid already used');
  const b = json<{ calendario?: { expiracao?: number }; valor?: { original?: string }; chave?: string; solicitacaoPagador?: string }>(raw);
  if (!b) return problem(400, 'CobOperacaoInvalida', 'body is not JSON');
  let original: bigint;
  try {
    original = fromValor(b.valor?.original ?? '');
    if (original <= 0n) throw new Error();
  } catch {
    return problem(400, 'CobOperacaoInvalida', 'valor.original must be like "123.45"');
  }
  if (!b.chave) return problem(400, 'CobOperacaoInvalida', 'chave is required');
  const c = sim.createCob(txid, { expiracao: b.calendario?.expiracao, original, chave: b.chave, solicitacaoPagador: b.solicitacaoPagador });
  return { status: 201, body: cobJson(c) };
}

function webhook(sim: PixSimState, method: string, chave: string | null, raw: string): Reply {
  if (chave === null) return problem(400, 'WebhookOperacaoInvalida', 'malformed chave');
  if (method === 'PUT') {
    const b = json<{ webhookUrl?: string }>(raw);
    try {
      new URL(b?.webhookUrl ?? '');
    } catch {
      return problem(400, 'WebhookOperacaoInvalida', 'webhookUrl must be a URL');
    }
    sim.webhooks.set(chave, { webhookUrl: b!.webhookUrl!, criacao: new Date().toISOString() });
    return { status: 204 };
  }
  if (method === 'GET') {
    const w = sim.webhooks.get(chave);
    return w ? { status: 200, body: { webhookUrl: w.webhookUrl, chave, criacao: w.criacao } } : problem(404, 'WebhookNaoEncontrado');
  }
  if (method === 'DELETE') {
    sim.webhooks.delete(chave);
    return { status: 204 };
  }
  return problem(404, 'NaoEncontrado');
}

function refund(sim: PixSimState, method: string, e2e: string | null, id: string | null, raw: string): Reply {
  if (e2e === null || id === null) return problem(400, 'DevolucaoOperacaoInvalida', 'malformed path');
  const found = sim.findPayment(e2e);
  if (!found) return problem(404, 'PixNaoEncontrado');
  const existing = found.item.devolucoes.find((d) => d.id === id);
  if (method === 'GET') return existing ? { status: 200, body: existing } : problem(404, 'DevolucaoNaoEncontrada');
  if (method !== 'PUT') return problem(404, 'NaoEncontrado');
  if (existing) return { status: 201, body: existing };
  const b = json<{ valor?: string }>(raw);
  if (!b) return problem(400, 'DevolucaoOperacaoInvalida', 'body is not JSON');
  let amount: bigint;
  try {
    amount = fromValor(b.valor ?? '');
  } catch {
    return problem(400, 'DevolucaoOperacaoInvalida', 'valor must be like "123.45"');
  }
  const r = sim.refund(found.cob, found.item, id, amount);
  return r.status === 400 ? problem(400, 'DevolucaoOperacaoInvalida', 'refund exceeds the payment') : r;
}
