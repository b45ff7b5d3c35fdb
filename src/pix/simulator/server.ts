import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '../../log.ts';
import { route } from './routes.ts';
import { RecSimState } from './recurrence.ts';
import { PixSimState, type SimSettings } from './state.ts';

// A PSP simulator speaking the BCB API Pix endpoints the adapter uses, so the embedded default
// runs the production adapter code path:
//   POST /oauth/token                        OAuth2 client credentials (HTTP Basic)
//   PUT  /cob/{txid}, GET /cob/{txid}        immediate charges
//   PUT  /webhook/{chave}, GET /webhook/{chave}
//   PUT  /pix/{e2eid}/devolucao/{id}         refunds (settled at once, then a callback)
//   GET  /qr/v2/{id}                         the payload a payer's bank would fetch (plain JSON here)
//   Pix Automático: /locrec, /rec, /solicrec, /cobr, /webhookrec, /webhookcobr and the payer's
//   and settlement system's side under /sim/ (recurrence.ts); GET /qr/v2/rec/{id}
// and one development endpoint standing in for the payer:
//   POST /sim/cob/{txid}/pagar               pays the charge (HTTP Basic with the same client
//                                            credentials) and POSTs {"pix":[…]} to <webhookUrl>/pix
// Routes: routes.ts. State is in memory (state.ts): a restarted simulator forgets its charges
// (development only).

const log = createLogger('pix-sim');

export interface PixSimulatorOptions extends SimSettings {
  host?: string;
  port?: number;
  /** How often scheduled recurring charges due today settle (the SPI's day); 0: only on request (tests). Default 60 s. */
  settleEveryMs?: number;
}

export interface PixSimulator {
  url: string;
  /** Pays a charge as a payer would and delivers the webhook; see POST /sim/cob/{txid}/pagar. */
  pay(txid: string, opts?: { valor?: string }): Promise<{ status: number; body: unknown }>;
  /** Pix Automático's side of the simulated PSP: recurrences, charges, the payer, the calendar. */
  rec: RecSimState;
  close(): Promise<void>;
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
  const sim = new PixSimState(o);
  const rec = new RecSimState(sim, {
    ispb: o.ispb ?? '99999999',
    merchantName: o.merchantName ?? 'CATRACA SIMULADOR',
    merchantCity: o.merchantCity ?? 'SAO PAULO',
  });
  const server = http.createServer(async (req, res) => {
    try {
      const method = req.method ?? 'GET';
      const url = new URL(req.url ?? '/', 'http://sim');
      const path = url.pathname.replace(/^\/v2(?=\/)/, '');
      const raw = method === 'GET' ? '' : await readBody(req);
      const reply = await route(sim, method, path, req.headers, raw, rec, url.searchParams);
      if (reply.body === undefined) return void res.writeHead(reply.status).end();
      const text = JSON.stringify(reply.body);
      res.writeHead(reply.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    } catch (err) {
      log.error('simulator error', { err });
      if (!res.headersSent)
        res.writeHead(500, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ title: 'Erro interno', status: 500 }));
    }
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  sim.baseUrl = `http://${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${addr.port}`;
  const settleEvery = o.settleEveryMs ?? 60_000;
  let settling: Promise<unknown> | null = null;
  const timer =
    settleEvery > 0
      ? setInterval(() => {
          settling ??= rec
            .settleDue()
            .catch((err) => log.error('simulated settlement failed', { err }))
            .finally(() => (settling = null));
        }, settleEvery)
      : null;
  timer?.unref();
  return {
    url: sim.baseUrl,
    pay: (txid, opts) => sim.pay(txid, opts),
    rec,
    close: () =>
      new Promise<void>((resolve) => {
        if (timer) clearInterval(timer);
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
