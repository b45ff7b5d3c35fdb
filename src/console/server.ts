import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener, RequestError } from '@hono/node-server';
import type { NatsConnection } from 'nats';
import type pg from 'pg';
import { createLogger } from '../log.ts';
import { TEXT } from '../web/http.ts';
import { compileTrust } from '../web/proxy.ts';
import { createConsoleApp } from './app.ts';
import { startConsoleCleanup } from './cleanup.ts';
import { checkConsolePort } from './config.ts';

// The console's HTTP server: its own process, address and port (src/console/main.ts), never the
// front door's or the portal's.

const log = createLogger('console');

export interface StartConsoleOptions {
  db: pg.Pool;
  nc: NatsConnection | null;
  host?: string;
  port?: number;
  /** CONSOLE_PUBLIC_URL: https gives Secure cookies and HSTS. */
  publicUrl?: string;
  /** CONSOLE_TRUSTED_PROXIES, parsed. */
  trustedProxies?: string[];
  /** Ports the console must not take (the front door's and the portal's). */
  reservedPorts?: Array<{ name: string; port: number }>;
  onResponse?: (status: number) => void;
  /** Run the periodic cleanup (src/console/cleanup.ts) while the server runs; default true. */
  cleanup?: boolean;
}

export interface ConsoleServer {
  url: string;
  close(): Promise<void>;
}

export async function startConsole(o: StartConsoleOptions): Promise<ConsoleServer> {
  checkConsolePort(o.port ?? 0, o.reservedPorts ?? []);
  const app = createConsoleApp({
    db: o.db,
    nc: o.nc,
    trust: compileTrust(o.trustedProxies ?? []),
    publicHttps: o.publicUrl?.startsWith('https:') ?? false,
  });
  const listener = getRequestListener(app.fetch, {
    errorHandler: (err) => {
      if (!(err instanceof RequestError)) log.error('console request failed outside the app', { err });
      return new Response(err instanceof RequestError ? 'Bad Request' : 'Internal Server Error', {
        status: err instanceof RequestError ? 400 : 500,
        headers: { 'content-type': TEXT, 'cache-control': 'no-store' },
      });
    },
  });
  const server = http.createServer((req, res) => {
    if (o.onResponse) res.once('finish', () => o.onResponse!(res.statusCode));
    void listener(req, res);
  });
  server.headersTimeout = 20000;
  server.requestTimeout = 30000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 0, o.host ?? '127.0.0.1', () => resolve());
  });
  const stopCleanup = o.cleanup === false ? () => {} : startConsoleCleanup(o.db);
  const addr = server.address() as AddressInfo;
  const host = addr.address === '0.0.0.0' || addr.address === '::' ? '127.0.0.1' : addr.address.includes(':') ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        stopCleanup();
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 2000).unref();
      }),
  };
}
