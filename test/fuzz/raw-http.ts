import net from 'node:net';

// A deliberately dumb HTTP/1.1 client over a raw TCP socket, for what fetch and node:http refuse
// to send: binary or NUL bytes in headers, a Content-Length that lies, truncated bodies, invalid
// UTF-8, bodies trickled byte by byte. One request per connection (`connection: close`).

export interface RawResponse {
  /** 0 when the server closed the connection without a status line */
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** the body as JSON, or undefined when it is not JSON */
  json: unknown;
  /** the server closed the connection (always true once this resolves, unless it timed out) */
  closed: boolean;
  timedOut: boolean;
}

export interface RawRequest {
  host?: string;
  port: number;
  method?: string;
  path?: string;
  /** header lines as given (name, value as bytes or string); nothing is added except what `auto` adds */
  headers?: Array<[string, string | Buffer]>;
  body?: Buffer | string;
  /** add host, connection: close and content-length (of `body`) unless given (default true) */
  auto?: boolean;
  /** give up after this long (default 15 s) */
  timeoutMs?: number;
}

export function rawRequest(r: RawRequest): Promise<RawResponse> {
  const body = r.body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body, 'utf8');
  const lines: Buffer[] = [Buffer.from(`${r.method ?? 'POST'} ${r.path ?? '/v1/chat/completions'} HTTP/1.1\r\n`, 'latin1')];
  const given = new Set((r.headers ?? []).map(([k]) => k.toLowerCase()));
  const all: Array<[string, string | Buffer]> = [...(r.headers ?? [])];
  if (r.auto !== false) {
    if (!given.has('host')) all.push(['host', `127.0.0.1:${r.port}`]);
    if (!given.has('connection')) all.push(['connection', 'close']);
    if (!given.has('content-length') && (r.method ?? 'POST') !== 'GET') all.push(['content-length', String(body.length)]);
  }
  for (const [k, v] of all) lines.push(Buffer.from(`${k}: `, 'latin1'), Buffer.isBuffer(v) ? v : Buffer.from(v, 'latin1'), Buffer.from('\r\n'));
  lines.push(Buffer.from('\r\n'));
  const head = Buffer.concat(lines);
  return new Promise((resolve) => {
    const s = net.connect(r.port, r.host ?? '127.0.0.1');
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (timedOut: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      resolve(parseResponse(Buffer.concat(chunks), !timedOut, timedOut));
    };
    const timer = setTimeout(() => finish(true), r.timeoutMs ?? 15000);
    s.on('data', (c) => {
      chunks.push(c);
      // a complete response with a content-length: done, whatever the server does with the socket
      const parsed = parseResponse(Buffer.concat(chunks), false, false);
      const len = Number(parsed.headers['content-length']);
      if (parsed.status && Number.isFinite(len) && parsed.body.length >= len) finish(false);
    });
    s.on('error', () => finish(false));
    s.on('close', () => finish(false));
    // no half-close after the request: uWS takes a FIN as the client leaving and drops the request
    s.write(Buffer.concat([head, body]));
  });
}

/** The payload of a chunked body (as much as has arrived). */
function dechunk(b: Buffer): Buffer {
  const parts: Buffer[] = [];
  let i = 0;
  for (;;) {
    const eol = b.indexOf('\r\n', i);
    if (eol < 0) break;
    const size = parseInt(b.toString('latin1', i, eol), 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(b.subarray(eol + 2, eol + 2 + size));
    i = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

function parseResponse(buf: Buffer, closed: boolean, timedOut: boolean): RawResponse {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return { status: 0, headers: {}, body: Buffer.alloc(0), json: undefined, closed, timedOut };
  const headLines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(headLines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const l of headLines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = buf.subarray(end + 4);
  const len = Number(headers['content-length']);
  if (Number.isFinite(len)) body = body.subarray(0, len);
  else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body);
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    json = undefined;
  }
  return { status, headers, body, json, closed, timedOut };
}

/**
 * Opens a connection and sends `data` one slice at a time, `intervalMs` apart (a slow-loris
 * sender). Resolves with what the server answered and when it closed the connection, or when
 * `maxMs` passed (timedOut).
 */
export function trickle(o: {
  port: number;
  data: Buffer;
  sliceBytes?: number;
  intervalMs: number;
  maxMs: number;
  /** sent at once on connect (e.g. complete headers, then a trickled body) */
  startBytes?: number;
  stopAfterBytes?: number;
}): Promise<RawResponse & { sentBytes: number; elapsedMs: number }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const s = net.connect(o.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let sent = 0;
    let settled = false;
    const limit = Math.min(o.data.length, o.stopAfterBytes ?? Infinity);
    if (o.startBytes) {
      sent = Math.min(o.startBytes, limit);
      s.write(o.data.subarray(0, sent));
    }
    const tick = setInterval(() => {
      if (sent >= limit || s.destroyed) return;
      const n = Math.min(o.sliceBytes ?? 1, limit - sent);
      s.write(o.data.subarray(sent, sent + n));
      sent += n;
    }, o.intervalMs);
    const finish = (timedOut: boolean) => {
      if (settled) return;
      settled = true;
      clearInterval(tick);
      clearTimeout(timer);
      s.destroy();
      resolve({ ...parseResponse(Buffer.concat(chunks), !timedOut, timedOut), sentBytes: sent, elapsedMs: Date.now() - started });
    };
    const timer = setTimeout(() => finish(true), o.maxMs);
    s.on('data', (c) => chunks.push(c));
    s.on('error', () => finish(false));
    s.on('close', () => finish(false));
  });
}
