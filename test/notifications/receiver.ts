import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

// A webhook receiver for the tests: a real HTTP server on loopback that verifies every request
// with the reference implementation (standardwebhooks' Webhook.verify: the published algorithm,
// the timestamp within 5 minutes) under the secret it was given, and keeps what came. It can be
// taken down and brought back on the same port (a receiver away for a while).

export interface Received {
  id: string;
  timestamp: number;
  signature: string;
  body: string;
  /** the parsed body when the signature verified; null when it did not */
  event: { type: string; timestamp: string; data: Record<string, unknown> } | null;
}

export interface Receiver {
  url: string;
  port: number;
  /** every request, verified or not, in arrival order */
  received: Received[];
  /** the secret(s) a request must be signed with */
  secrets: string[];
  /** the status answered (default 200) */
  status: number;
  verified(type?: string): Received[];
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startReceiver(path = '/hooks/catraca'): Promise<Receiver> {
  const r: Receiver = {
    url: '',
    port: 0,
    received: [],
    secrets: [],
    status: 200,
    verified: (type) => r.received.filter((x) => x.event && (!type || x.event.type === type)),
    down: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
    up: () => listen(r.port),
    close: () => r.down(),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const headers = {
        'webhook-id': String(req.headers['webhook-id']),
        'webhook-timestamp': String(req.headers['webhook-timestamp']),
        'webhook-signature': String(req.headers['webhook-signature']),
      };
      let event: Received['event'] = null;
      for (const s of r.secrets) {
        try {
          event = new Webhook(s).verify(body, headers) as Received['event'];
          break;
        } catch {
          // the next secret
        }
      }
      r.received.push({ id: headers['webhook-id'], timestamp: Number(headers['webhook-timestamp']), signature: headers['webhook-signature'], body, event });
      res.writeHead(req.url === path ? r.status : 404, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listen(0);
  r.port = (server.address() as AddressInfo).port;
  r.url = `http://127.0.0.1:${r.port}${path}`;
  return r;
}

/** Polls until `check` holds (or throws with `what` after `timeoutMs`). */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}
