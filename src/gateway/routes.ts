import { getBatchBody, listBatchesBody } from '../batch/batches.ts';
import {
  cancelMessageBatch,
  createMessageBatch,
  deleteMessageBatch,
  getMessageBatchBody,
  listMessageBatchesBody,
  messageBatchResults,
} from '../batch/message-batches.ts';
import { createFile, deleteFileBody, fileContent, getFileBody, listFilesBody } from '../batch/files.ts';
import type { Config } from '../config.ts';
import type { ApiKeyRecord } from '../db/keys.ts';
import { errors } from '../errors.ts';
import { createLogger } from '../log.ts';
import { chat } from '../protocols/chat/index.ts';
import { completions } from '../protocols/completions/index.ts';
import { embeddings } from '../protocols/embeddings/index.ts';
import { requestIdOf } from '../protocols/responses/ids.ts';
import { responses } from '../protocols/responses/index.ts';
import { deleteResponseBody, getResponseBody, inputItemsBody } from '../protocols/responses/reads.ts';
import { countTokens, messages } from '../protocols/messages/index.ts';
import type { ParsedRequest, Protocol } from '../protocols/types.ts';
import { activityBody, creditsBody, generationBody, keyBody, modelsBody } from './account.ts';
import { answerAfterBody, readBody } from './body.ts';
import type { Door } from './door.ts';
import { Exchange } from './exchange.ts';
import { presentedKey } from './key-cache.ts';
import { storableText } from '../protocols/stored-text.ts';
import { publicError, type ResponseState, sendBytes, sendJson } from './respond.ts';
import type { HttpRequest, HttpResponse, TemplatedApp } from './uws.ts';
import { GEMINI_PATHS, registerGeminiRoutes } from './gemini-routes.ts';

const log = createLogger('gateway');

// The front door's routes: the one table of what it answers. A path it knows with another method
// is a 405; any other path a 404.

type Method = 'get' | 'post' | 'del';

/** A route of the public API: a protocol's POST (admission, dispatch, relay), or a read. */
export type Route =
  | { method: 'post'; path: string; protocol: Protocol<ParsedRequest>; anthropicAuth?: boolean }
  | { method: Method; path: string; read: (door: Door, key: ApiKeyRecord, params: RouteParams) => Promise<unknown> }
  | { method: 'get'; path: string; open: (door: Door) => { status: number; body: unknown }; untracked?: boolean }
  | {
      method: 'post';
      path: string;
      /** a body other than a protocol's JSON (a multipart upload), read up to `maxBytes(door)` */
      upload: (door: Door, key: ApiKeyRecord, body: Buffer, contentType: string) => Promise<unknown>;
      maxBytes: (door: Door) => number;
    }
  | { method: 'get'; path: string; download: (door: Door, key: ApiKeyRecord, params: RouteParams) => Promise<Buffer>; contentType: string };

export interface RouteParams {
  query: URLSearchParams;
  /** the path's `:name` parameters, in order */
  path: string[];
}

export const ROUTES: Route[] = [
  { method: 'post', path: '/v1/chat/completions', protocol: chat as Protocol<ParsedRequest> },
  { method: 'post', path: '/v1/embeddings', protocol: embeddings as Protocol<ParsedRequest> },
  { method: 'post', path: '/v1/completions', protocol: completions as Protocol<ParsedRequest> },
  { method: 'post', path: '/v1/messages', protocol: messages as Protocol<ParsedRequest>, anthropicAuth: true },
  { method: 'post', path: '/v1/messages/count_tokens', protocol: countTokens as Protocol<ParsedRequest>, anthropicAuth: true },
  { method: 'get', path: '/v1/credits', read: (door, key) => creditsBody(door.db, key) },
  { method: 'get', path: '/v1/key', read: (door, key) => keyBody(door.db, key) },
  { method: 'get', path: '/v1/auth/key', read: (door, key) => keyBody(door.db, key) },
  { method: 'get', path: '/v1/activity', read: (door, key, p) => activityBody(door.db, key, p.query.get('date')) },
  { method: 'get', path: '/v1/generation', read: (door, key, p) => generationBody(door.db, key, requestIdOf(p.query.get('id') ?? '')) },
  { method: 'post', path: '/v1/responses', protocol: responses as Protocol<ParsedRequest> },
  { method: 'get', path: '/v1/responses/:id', read: (door, key, p) => getResponseBody(door.db, key, p.path[0]) },
  { method: 'del', path: '/v1/responses/:id', read: (door, key, p) => deleteResponseBody(door.db, key, p.path[0]) },
  { method: 'get', path: '/v1/responses/:id/input_items', read: (door, key, p) => inputItemsBody(door.db, key, p.path[0], p.query) },
  {
    method: 'post',
    path: '/v1/files',
    upload: (door, key, body, contentType) => createFile(door.db, key, fileLimits(door.config), body, contentType),
    maxBytes: (door) => multipartBound(door.config.FILES_MAX_BYTES),
  },
  { method: 'get', path: '/v1/files', read: (door, key, p) => listFilesBody(door.db, key, p.query) },
  { method: 'get', path: '/v1/files/:id', read: (door, key, p) => getFileBody(door.db, key, p.path[0]) },
  { method: 'del', path: '/v1/files/:id', read: (door, key, p) => deleteFileBody(door.db, key, p.path[0]) },
  { method: 'get', path: '/v1/files/:id/content', download: (door, key, p) => fileContent(door.db, key, p.path[0]), contentType: 'application/jsonl' },
  {
    method: 'post',
    path: '/v1/batches',
    upload: (door, key, body) => door.batches().create(key, body),
    maxBytes: (door) => door.config.MAX_BODY_BYTES,
  },
  { method: 'get', path: '/v1/batches', read: (door, key, p) => listBatchesBody(door.db, key, p.query) },
  { method: 'get', path: '/v1/batches/:id', read: (door, key, p) => getBatchBody(door.db, key, p.path[0]) },
  { method: 'post', path: '/v1/batches/:id/cancel', read: (door, key, p) => door.batches().cancel(key, p.path[0]) },
  {
    method: 'post',
    path: '/v1/messages/batches',
    upload: (door, key, body) =>
      createMessageBatch(door.db, door.batches(), key, body, {
        ...fileLimits(door.config),
        inFlight: { maxBatches: door.config.BATCH_MAX_IN_FLIGHT, maxLines: door.config.BATCH_MAX_LINES_IN_FLIGHT },
      }),
    maxBytes: (door) => door.config.FILES_MAX_BYTES,
  },
  { method: 'get', path: '/v1/messages/batches', read: (door, key, p) => listMessageBatchesBody(door.db, key, p.query) },
  { method: 'get', path: '/v1/messages/batches/:id', read: (door, key, p) => getMessageBatchBody(door.db, key, p.path[0]) },
  { method: 'del', path: '/v1/messages/batches/:id', read: (door, key, p) => deleteMessageBatch(door.db, key, p.path[0]) },
  { method: 'post', path: '/v1/messages/batches/:id/cancel', read: (door, key, p) => cancelMessageBatch(door.db, door.batches(), key, p.path[0]) },
  {
    method: 'get',
    path: '/v1/messages/batches/:id/results',
    download: (door, key, p) => messageBatchResults(door.db, key, p.path[0]),
    contentType: 'application/x-jsonl',
  },
  { method: 'get', path: '/v1/models', open: (door) => ({ status: 200, body: modelsBody(door.catalog.all(), door.catalog.aliases()) }) },
  {
    method: 'get',
    path: '/healthz',
    untracked: true,
    open: (door) => ({
      status: door.draining ? 503 : 200,
      body: { status: door.draining ? 'draining' : 'ok', door: door.id, in_flight: door.stats().inFlight },
    }),
  },
];

const fileLimits = (config: Config) => ({ maxBytes: config.FILES_MAX_BYTES, maxLines: config.BATCH_MAX_LINES, retentionDays: config.BATCH_RETENTION_DAYS });

/** A path pattern (`/v1/responses/:id`) as a matcher of request paths. */
function matcher(pattern: string): RegExp {
  return new RegExp(`^${pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z_]+/g, '[^/]+')}$`);
}

/** Registers every route of `routes` on `app`, and the 404/405 answer for everything else. */
export function registerRoutes(app: TemplatedApp, door: Door, routes: Route[] = ROUTES): void {
  for (const route of routes) {
    if ('protocol' in route) app.post(route.path, exchangeRoute(door, route.protocol, route.anthropicAuth === true ? 'anthropic' : 'bearer'));
    else if ('read' in route) app[route.method](route.path, readRoute(door, route.path, route.read));
    else if ('upload' in route) app.post(route.path, uploadRoute(door, route.upload, route.maxBytes(door)));
    else if ('download' in route)
      app.get(
        route.path,
        readRoute(door, route.path, (d, key, p) => route.download(d, key, p).then((bytes) => new RawBody(bytes, route.contentType))),
      );
    else app.get(route.path, openRoute(door, route.open, route.untracked === true));
  }
  registerGeminiRoutes(app, door);
  const known = routes.map((r) => ({ match: matcher(r.path), protocol: 'protocol' in r ? r.protocol : undefined }));
  known.push(...GEMINI_PATHS);
  app.any('/*', (res, req) => {
    const s = door.begin(res);
    const method = req.getMethod().toUpperCase();
    const url = req.getUrl();
    const route = known.find((r) => r.match.test(url));
    const err = route ? errors.methodNotAllowed(method, url) : errors.routeNotFound(method, url);
    door.track(err.status);
    // a protocol's path answers in that protocol's error shape (Anthropic's for /v1/messages)
    const answer = route?.protocol ? route.protocol.errorBody(err) : { body: err.toJSON() };
    sendJson(s, answer.status ?? err.status, answer.body, { ...err.headers, ...answer.headers });
  });
}

/**
 * A protocol's POST: the key checked before the body is read, the body read, the exchange run. A
 * key refused (401, 429, 503) is answered at once and the connection closed, whatever of the body
 * is still on its way: when the refusal needs a database lookup, the body is read meanwhile and
 * dropped as soon as the lookup refuses.
 */
export function exchangeRoute(
  door: Door,
  protocol: Protocol<ParsedRequest>,
  auth: 'bearer' | 'anthropic' | 'google',
  /** the protocol of this request, from its path and query (Gemini's model in the path); throws a CatracaError to refuse it */
  select?: (url: string, query: URLSearchParams) => Protocol<ParsedRequest>,
) {
  const sendError = (s: ResponseState, err: unknown) => {
    const e = publicError(err);
    const { body, headers, status } = protocol.errorBody(e);
    sendJson(s, status ?? e.status, body, { ...protocol.responseHeaders?.(s.requestId), ...e.headers, ...headers });
  };
  return (res: HttpResponse, req: HttpRequest) => {
    const s = door.begin(res);
    const authorization = req.getHeader('authorization');
    const query = auth === 'google' || select ? new URLSearchParams(req.getQuery() ?? '') : undefined;
    // Google's clients send the key as x-goog-api-key (or ?key=), Anthropic's as x-api-key
    const xApiKey = auth === 'anthropic' ? req.getHeader('x-api-key') : auth === 'google' ? req.getHeader('x-goog-api-key') || (query?.get('key') ?? '') : '';
    const contentLength = Number(req.getHeader('content-length') || 0);
    // the protocol's own headers, read now (uWS hands headers out only during this call)
    let run = protocol;
    let headerRefusal: unknown;
    try {
      if (select) run = select(req.getUrl(), query!);
      run = run.withHeaders?.((name) => req.getHeader(name)) ?? run;
    } catch (err) {
      headerRefusal = err;
    }
    const exchange = new Exchange(door.deps, run, s, req.getHeader('traceparent') || undefined);
    res.onAborted(() => exchange.aborted());
    if (door.refuseIfDraining(s, sendError)) return;
    let record: ApiKeyRecord | Promise<ApiKeyRecord>;
    try {
      const key = presentedKey(authorization, xApiKey); // no key, or not one of ours: 401 before reading any of the body
      if (headerRefusal) throw headerRefusal;
      record = door.keys.resolve(key, door.clientOf(res, req));
    } catch (err) {
      s.closeConnection = true; // none of the body is kept
      door.track(publicError(err).status, protocol.name);
      answerAfterBody(res, door.config.MAX_BODY_BYTES, contentLength, door.config.BODY_TIMEOUT_MS, () => sendError(s, err));
      return;
    }
    door.enter();
    const authenticated = record instanceof Promise ? record : Promise.resolve(record);
    const stopBody = readBody(
      res,
      door.config.MAX_BODY_BYTES,
      contentLength,
      (body) => void exchange.run(body, authenticated),
      (err, closeConnection) => {
        if (s.aborted) return; // the client left first: already counted by exchange.aborted()
        s.closeConnection = closeConnection;
        sendError(s, err);
        door.leave(err.status, protocol.name);
      },
      door.config.BODY_TIMEOUT_MS,
    );
    // the key lookup (a database read on a cache miss) overlaps the body upload; a refusal ends it
    authenticated.catch((err) => {
      if (s.aborted) return;
      s.closeConnection = true; // (this runs before the exchange's own await of the same refusal)
      // the body arrived first: the exchange answers; else the refusal, once the rest of the body is dropped
      stopBody(() => {
        if (s.aborted) return; // already counted by exchange.aborted()
        sendError(s, err);
        door.leave(publicError(err).status, protocol.name);
      });
    });
  };
}

/**
 * An authenticated read: the key, then `read`, answered as JSON; errors mapped. A refused key is
 * answered and the connection closed; path and query values that PostgreSQL cannot take (control
 * characters) are a 400 naming them.
 */
function readRoute(door: Door, path: string, read: (door: Door, key: ApiKeyRecord, params: RouteParams) => Promise<unknown>) {
  const names = [...path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]);
  return (res: HttpResponse, req: HttpRequest) => {
    const s = door.begin(res);
    const authorization = req.getHeader('authorization');
    const xApiKey = req.getHeader('x-api-key');
    const rawQuery = req.getQuery() ?? '';
    const rawPath = names.map((_, i) => req.getParameter(i) ?? '');
    res.onAborted(() => (s.aborted = true));
    if (door.refuseIfDraining(s)) return;
    const fail = (err: unknown) => {
      const e = publicError(err);
      if (e.status === 500) log.error('request failed', { request_id: s.requestId, err });
      door.track(e.status);
      sendJson(s, e.status, e.toJSON(), e.headers);
    };
    const refuse = (err: unknown) => {
      s.closeConnection = true;
      fail(err);
    };
    let record: ApiKeyRecord | Promise<ApiKeyRecord>;
    try {
      record = door.keys.resolve(presentedKey(authorization, xApiKey), door.clientOf(res, req));
    } catch (err) {
      return refuse(err);
    }
    (record instanceof Promise ? record : Promise.resolve(record)).then((key) => {
      let params: RouteParams;
      try {
        params = routeParams(names, rawPath, rawQuery);
      } catch (err) {
        return fail(err);
      }
      return read(door, key, params).then((body) => {
        door.track(200);
        if (body instanceof RawBody) sendBytes(s, 200, body.bytes, body.contentType);
        else sendJson(s, 200, body);
      }, fail);
    }, refuse);
  };
}

/** A read's answer sent as these bytes, not as JSON. */
class RawBody {
  constructor(
    readonly bytes: Buffer,
    readonly contentType: string,
  ) {}
}

/**
 * An authenticated upload: the key checked while the body arrives (read up to `limit`, its own bound,
 * not MAX_BODY_BYTES), then `upload`, answered as JSON. A refused key is answered when the body has
 * ended (dropped, not stored) and the connection closed.
 */
function uploadRoute(door: Door, upload: (door: Door, key: ApiKeyRecord, body: Buffer, contentType: string) => Promise<unknown>, limit: number) {
  return (res: HttpResponse, req: HttpRequest) => {
    const s = door.begin(res);
    const authorization = req.getHeader('authorization');
    const xApiKey = req.getHeader('x-api-key');
    const contentType = req.getHeader('content-type');
    const contentLength = Number(req.getHeader('content-length') || 0);
    res.onAborted(() => (s.aborted = true));
    if (door.refuseIfDraining(s)) return;
    const fail = (err: unknown) => {
      const e = publicError(err);
      if (e.status === 500) log.error('request failed', { request_id: s.requestId, err });
      door.track(e.status);
      sendJson(s, e.status, e.toJSON(), e.headers);
    };
    let record: ApiKeyRecord | Promise<ApiKeyRecord>;
    try {
      record = door.keys.resolve(presentedKey(authorization, xApiKey), door.clientOf(res, req));
    } catch (err) {
      s.closeConnection = true;
      return answerAfterBody(res, limit, contentLength, door.config.BODY_TIMEOUT_MS, () => fail(err));
    }
    const authenticated = record instanceof Promise ? record : Promise.resolve(record);
    const stopBody = readBody(
      res,
      limit,
      contentLength,
      (body) => {
        authenticated.then(
          (key) =>
            upload(door, key, body, contentType).then((answer) => {
              door.track(200);
              sendJson(s, 200, answer);
            }, fail),
          () => {}, // answered below
        );
      },
      (err, closeConnection) => {
        if (s.aborted) return;
        s.closeConnection = closeConnection;
        fail(err);
      },
      door.config.BODY_TIMEOUT_MS,
    );
    authenticated.catch((err) => {
      if (s.aborted) return;
      s.closeConnection = true;
      // answered once the rest of the body is dropped (or at once, when it had all arrived)
      if (!stopBody(() => fail(err))) fail(err);
    });
  };
}

/** The multipart body's bound for a file of at most `fileBytes`: the file plus room for the form's fields and boundaries. */
export const multipartBound = (fileBytes: number) => fileBytes + 64 * 1024;

function openRoute(door: Door, answer: (door: Door) => { status: number; body: unknown }, untracked: boolean) {
  return (res: HttpResponse) => {
    const s = door.begin(res);
    const { status, body } = answer(door);
    if (!untracked) door.track(status);
    sendJson(s, status, body);
  };
}

/** The path's parameters (decoded) and query; a value with control characters, or a malformed escape, is a 400 naming it. */
function routeParams(names: string[], rawPath: string[], rawQuery: string): RouteParams {
  const path = rawPath.map((raw, i) => {
    let v: string;
    try {
      v = decodeURIComponent(raw);
    } catch {
      throw errors.badRequest(`Invalid value for '${names[i]}': malformed percent-encoding.`, names[i]);
    }
    return storableText(v, names[i]);
  });
  const query = new URLSearchParams(rawQuery);
  for (const [name, value] of query) storableText(value, name);
  return { query, path };
}
