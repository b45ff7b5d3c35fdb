import type { HttpResponse } from './uws.ts';
import { CatracaError, errors } from '../errors.ts';
import { classifyDbError } from '../db/pool.ts';

// Status lines uWS writes verbatim.
const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  402: '402 Payment Required',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  408: '408 Request Timeout',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  502: '502 Bad Gateway',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
};
export const statusLine = (status: number) => STATUS_TEXT[status] ?? `${status} Error`;

/**
 * uWS closes an idle keep-alive connection after 10 s without saying so; a client reusing the
 * socket at that instant gets ECONNRESET. Announcing a shorter timeout (as Node's own servers do)
 * makes node:http and undici clients retire idle sockets first.
 */
export const KEEP_ALIVE_HINT = 'timeout=5';

/** State every handler keeps for its response; `done` guards against writing after abort or end. */
export interface ResponseState {
  res: HttpResponse;
  requestId: string;
  aborted: boolean;
  done: boolean;
  closeConnection?: boolean;
}

export function sendJson(s: ResponseState, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (s.aborted || s.done) return;
  s.done = true;
  const payload = JSON.stringify(body);
  s.res.cork(() => {
    s.res.writeStatus(statusLine(status));
    s.res.writeHeader('content-type', 'application/json');
    s.res.writeHeader('x-request-id', s.requestId);
    if (!s.closeConnection) s.res.writeHeader('keep-alive', KEEP_ALIVE_HINT);
    for (const k in headers) s.res.writeHeader(k, headers[k]);
    s.res.end(payload, s.closeConnection);
  });
}

/** A body of bytes as they are (a stored file's content), with its content type. */
export function sendBytes(s: ResponseState, status: number, body: Buffer, contentType: string): void {
  if (s.aborted || s.done) return;
  s.done = true;
  s.res.cork(() => {
    s.res.writeStatus(statusLine(status));
    s.res.writeHeader('content-type', contentType);
    s.res.writeHeader('x-request-id', s.requestId);
    if (!s.closeConnection) s.res.writeHeader('keep-alive', KEEP_ALIVE_HINT);
    s.res.end(body, s.closeConnection);
  });
}

/**
 * What the client is told about a failure: our own errors as they are; PostgreSQL gone, saturated
 * or too slow → 503 with retry-after (nothing was admitted or charged); anything else → 500.
 */
export function publicError(err: unknown): CatracaError {
  if (err instanceof CatracaError) return err;
  const db = classifyDbError(err);
  if (db === 'unavailable') return errors.databaseUnavailable();
  if (db === 'timeout') return errors.databaseTimeout();
  return errors.internal();
}

export function sendError(s: ResponseState, err: unknown): void {
  const e = publicError(err);
  sendJson(s, e.status, e.toJSON(), e.headers);
}
