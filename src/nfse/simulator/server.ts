import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { createLogger } from '../../log.ts';
import { readPkcs12, selfSignedPkcs12 } from '../certificate.ts';
import { SefinState } from './sefin.ts';

// A simulator of Sefin Nacional (the national NFS-e issuing service) for `npm start` and the
// tests, speaking the API catraca's client uses, under a base path like the real one's
// (https://sefin.producaorestrita.nfse.gov.br/SefinNacional):
//   POST /SefinNacional/nfse                  a DPS → an NFS-e (sefin.ts checks it as the service does)
//   GET  /SefinNacional/dps/{idDps}           the access key of the NFS-e made from a DPS
//   GET  /SefinNacional/nfse/{chave}          the NFS-e
//   POST /SefinNacional/nfse/{chave}/eventos  the cancellation event
// over HTTPS with a client certificate required (mTLS): the handshake fails without one the
// simulator trusts (the operator's certificate, as ICP-Brasil's chain is trusted by the real one).
// Its own certificate is self-signed for 127.0.0.1/localhost: catraca trusts it through NFSE_CA_FILE.
// State is in memory.

const log = createLogger('sefin-sim');

export interface SefinSimulator {
  /** the base URL (NFSE_URL) */
  url: string;
  /** PEM of the simulator's server certificate (NFSE_CA_FILE) */
  caPem: string;
  state: SefinState;
  close(): Promise<void>;
}

export async function startSefinSimulator(o: {
  /** the client certificates it trusts (PEM) */
  trustedClients: string[];
  ambiente?: '1' | '2';
  host?: string;
  port?: number;
}): Promise<SefinSimulator> {
  const own = selfSignedPkcs12({ name: 'SEFIN NACIONAL SIMULADOR', document: '00394460005887', password: 'sefin-sim' });
  const a1 = readPkcs12(own.pfx, 'sefin-sim');
  const state = new SefinState(o.ambiente ?? '2', a1);
  const server = https.createServer(
    { key: a1.keyPem, cert: a1.certPem, requestCert: true, rejectUnauthorized: true, ca: o.trustedClients },
    async (req, res) => {
      const send = (status: number, body: unknown) => {
        const text = JSON.stringify(body);
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) }).end(text);
      };
      try {
        if (state.unavailable) return send(503, { message: 'Serviço indisponível' });
        const client = (req.socket as TLSSocket).getPeerX509Certificate() ?? null;
        const path = new URL(req.url ?? '/', 'https://sim').pathname.replace(/^\/SefinNacional(?=\/)/i, '');
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const c of req) {
          size += (c as Buffer).length;
          if (size > 2 * 1024 * 1024) return send(413, { message: 'Payload muito grande' });
          chunks.push(c as Buffer);
        }
        let body: unknown = null;
        if (req.method === 'POST') {
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            body = null;
          }
        }
        let m: RegExpExecArray | null;
        if (req.method === 'POST' && path === '/nfse') {
          const r = await state.receiveDps(body, client);
          return send(r.status, r.body);
        }
        if (req.method === 'GET' && (m = /^\/dps\/([A-Z0-9]+)$/.exec(path))) {
          const r = state.dps(m[1]);
          return send(r.status, r.body);
        }
        if (req.method === 'GET' && (m = /^\/nfse\/([0-9A-Z]{50})$/.exec(path))) {
          const r = state.nfse(m[1]);
          return send(r.status, r.body);
        }
        if (req.method === 'POST' && (m = /^\/nfse\/([0-9A-Z]{50})\/eventos$/.exec(path))) {
          const r = await state.receiveEvent(m[1], body, client);
          return send(r.status, r.body);
        }
        send(404, { message: 'Recurso não encontrado' });
      } catch (err) {
        log.error('sefin simulator error', { err: err as Error });
        if (!res.headersSent) send(500, { message: 'Erro interno' });
      }
    },
  );
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${addr.port}/SefinNacional`,
    caPem: a1.certPem,
    state,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
