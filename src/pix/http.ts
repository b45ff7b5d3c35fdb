import http from 'node:http';
import https from 'node:https';

export interface TlsOptions {
  /** Client certificate and key (PEM) for mTLS with the PSP, and an optional CA bundle. */
  cert?: string | Buffer;
  key?: string | Buffer;
  ca?: string | Buffer;
  passphrase?: string;
}

export interface HttpResult {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json: unknown;
}

/** Small JSON-over-HTTP(S) client with mTLS support (fetch cannot present a client certificate). */
export function httpRequest(
  url: string,
  opts: { method: string; headers?: Record<string, string>; body?: string; tls?: TlsOptions; timeoutMs?: number },
): Promise<HttpResult> {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      u,
      {
        method: opts.method,
        headers: {
          accept: 'application/json',
          ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}),
          ...opts.headers,
        },
        ...(u.protocol === 'https:' ? { cert: opts.tls?.cert, key: opts.tls?.key, ca: opts.tls?.ca, passphrase: opts.tls?.passphrase } : {}),
        timeout: opts.timeoutMs ?? 15000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          let json: unknown = null;
          try {
            json = body ? JSON.parse(body) : null;
          } catch {
            json = null;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timeout calling ${u.origin}${u.pathname}`)));
    req.on('error', reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}
