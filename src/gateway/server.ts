import { randomBytes } from 'node:crypto';
import type { NatsConnection } from 'nats';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { errors, type CatracaError } from '../errors.ts';
import { createLogger } from '../log.ts';
import { App, closeListenSocket, localPort, type HttpResponse, type HttpRequest, type us_listen_socket } from './uws.ts';
import { readBody } from './body.ts';
import { publicError, sendError, sendJson, type ResponseState } from './respond.ts';
import { bearerKey, KeyCache } from './key-cache.ts';
import { Catalog } from '../catalog/catalog.ts';
import { StreamRouter } from './stream-router.ts';
import { ChatCompletion, newRequestId } from './chat/handler.ts';
import { creditsBody, generationBody, keyBody, modelsBody } from './account.ts';
import { createGatewayMetrics } from './metrics.ts';
import { AdmissionBatcher } from '../billing/admission-batcher.ts';
import { Admission } from '../billing/admission.ts';
import { Dispatcher } from './dispatcher.ts';
import { startLocalPools } from './local-pools.ts';
import { registerMonitoring } from '../bus/monitoring.ts';
import { serveMetrics } from '../metrics/http.ts';
import { tracerFromEnv, type Tracer } from '../tracing/tracer.ts';

const log = createLogger('gateway');
import { VERSION } from '../version.ts';

export interface GatewayOptions {
  config: Config;
  db: Db;
  nc: NatsConnection;
  host?: string;
  port?: number;
  doorId?: string;
  portalUrl?: string;
  /** Spans of requests; default from OTEL_* (no export when unset). */
  tracer?: Tracer;
}

export interface Gateway {
  port: number;
  doorId: string;
  /** Stops accepting, waits for in-flight requests up to `graceMs`, then closes. */
  close(graceMs?: number): Promise<void>;
  stats(): { inFlight: number; requests: number; byStatus: Record<number, number> };
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const { config, db, nc } = opts;
  const doorId = opts.doorId ?? `gw${randomBytes(6).toString('hex')}`;
  const keys = new KeyCache(db, config.KEY_CACHE_TTL_MS);
  keys.listen(nc);
  const catalog = new Catalog(db);
  await catalog.start(nc);
  const router = new StreamRouter(nc, doorId, config.STREAM_IDLE_TIMEOUT_MS);
  router.start();
  const tracer = opts.tracer ?? tracerFromEnv('catraca-gateway');

  let inFlight = 0;
  let requests = 0;
  const byStatus: Record<number, number> = {};
  let draining = false;
  let drained: (() => void) | null = null;
  const admission = new Admission(db, new AdmissionBatcher(db), {
    doorId,
    windowMs: config.ADMISSION_LEASE_MS,
    richness: config.ADMISSION_LEASE_RICHNESS,
    leaseAfter: config.ADMISSION_LEASE_AFTER,
    holdTtlMs: config.REQUEST_TIMEOUT_MS + config.HOLD_GRACE_MS,
    onError: (what, err) => log.warn(what, { err: err as Error }),
  });
  keys.onInvalidate((keyId) => admission.invalidateKey(keyId));
  const gm = createGatewayMetrics(
    () => inFlight,
    () => router.size,
    admission,
    () => dispatcher.depth(),
  );
  const track = (status: number, startedAt = Date.now(), ttfbMs: number | null = null) => {
    byStatus[status] = (byStatus[status] ?? 0) + 1;
    gm.answered(status, startedAt, ttfbMs);
  };
  const local = await startLocalPools({
    config,
    nc,
    catalog,
    router,
    doorId,
    tracer,
    metrics: gm.metrics,
    onFree: (pools) => dispatcher.localFree(pools),
    log,
  });
  const monitoring = await registerMonitoring(nc, { name: 'catraca-gateway', version: VERSION, instanceId: doorId, metrics: gm.metrics });

  const begin = (res: HttpResponse, req: HttpRequest): ResponseState => {
    requests++;
    return { res, requestId: newRequestId(), aborted: false, done: false, closeConnection: draining };
  };
  const settleOne = () => {
    inFlight--;
    if (draining && inFlight === 0) drained?.();
  };
  const refuseIfDraining = (s: ResponseState): boolean => {
    if (!draining) return false;
    track(503);
    sendError(s, errors.shuttingDown());
    return true;
  };

  const dispatcher = new Dispatcher(nc, {
    maxWaitMs: config.DISPATCH_WAIT_MS,
    maxQueued: config.DISPATCH_MAX_WAITING,
    maxPerTenant: config.DISPATCH_MAX_WAITING_PER_TENANT,
    onWait: (pool, ms) => gm.waited(pool, ms),
  });
  dispatcher.start();
  const poolGauges = setInterval(() => gm.trackPools(), 1000);
  poolGauges.unref();
  const chatDeps = {
    config,
    db,
    nc,
    keys,
    catalog,
    router,
    portalUrl: opts.portalUrl,
    tracer,
    admission,
    dispatcher,
    local: local?.worker,
    metrics: gm,
    onFinish: (status: number, ttfbMs: number | null, startedAt: number) => {
      track(status, startedAt, ttfbMs);
      settleOne();
    },
  };

  /** Authenticated GET: runs `body` after auth, answers JSON, maps errors. */
  const authedGet =
    (handler: (key: Awaited<ReturnType<KeyCache['authenticate']>>, query: URLSearchParams) => Promise<unknown>) => (res: HttpResponse, req: HttpRequest) => {
      const s = begin(res, req);
      const authorization = req.getHeader('authorization');
      const query = new URLSearchParams(req.getQuery() ?? '');
      res.onAborted(() => (s.aborted = true));
      if (refuseIfDraining(s)) return;
      keys
        .authenticate(authorization)
        .then((key) => handler(key, query))
        .then((body) => {
          track(200);
          sendJson(s, 200, body);
        })
        .catch((err) => {
          const e = publicError(err);
          if (e.status === 500) log.error('request failed', { request_id: s.requestId, err });
          track(e.status);
          sendError(s, e);
        });
    };

  const app = App()
    .post('/v1/chat/completions', (res, req) => {
      const s = begin(res, req);
      const authorization = req.getHeader('authorization');
      const contentLength = Number(req.getHeader('content-length') || 0);
      const chat = new ChatCompletion(chatDeps, s, authorization, req.getHeader('traceparent') || undefined);
      res.onAborted(() => chat.aborted());
      if (refuseIfDraining(s)) return;
      try {
        bearerKey(authorization); // no key, or not one of ours: 401 before reading any of the body
      } catch (err) {
        s.closeConnection = contentLength > 0;
        track((err as CatracaError).status);
        sendError(s, err);
        return;
      }
      inFlight++;
      // the key lookup (a database read on a cache miss) overlaps the body upload
      const key = keys.authenticate(authorization);
      key.catch(() => {});
      readBody(
        res,
        config.MAX_BODY_BYTES,
        contentLength,
        (body) => void chat.run(body, key),
        (err, closeConnection) => {
          if (s.aborted) return; // the client left first: already counted by chat.aborted()
          s.closeConnection = closeConnection;
          sendError(s, err);
          track(err.status);
          settleOne();
        },
        config.BODY_TIMEOUT_MS,
      );
    })
    .get(
      '/v1/credits',
      authedGet((key) => creditsBody(db, key)),
    )
    .get(
      '/v1/key',
      authedGet((key) => keyBody(db, key)),
    )
    .get(
      '/v1/auth/key',
      authedGet((key) => keyBody(db, key)),
    )
    .get(
      '/v1/generation',
      authedGet((key, query) => generationBody(db, key, query.get('id') ?? '')),
    )
    .get('/v1/models', (res, req) => {
      const s = begin(res, req);
      track(200);
      sendJson(s, 200, modelsBody(catalog.all()));
    })
    .get('/healthz', (res, req) => {
      const s = begin(res, req);
      sendJson(s, draining ? 503 : 200, { status: draining ? 'draining' : 'ok', door: doorId, in_flight: inFlight });
    })
    .any('/*', (res, req) => {
      const s = begin(res, req);
      const method = req.getMethod().toUpperCase();
      const url = req.getUrl();
      const known = ['/v1/chat/completions', '/v1/credits', '/v1/key', '/v1/models', '/v1/generation'].includes(url);
      const err = known ? errors.methodNotAllowed(method, url) : errors.routeNotFound(method, url);
      track(err.status);
      sendError(s, err);
    });

  const host = opts.host ?? config.GATEWAY_HOST;
  const wantedPort = opts.port ?? config.GATEWAY_PORT;
  const listenSocket = await new Promise<us_listen_socket>((resolve, reject) => {
    app.listen(host, wantedPort, (token) => (token ? resolve(token) : reject(new Error(`cannot listen on ${host}:${wantedPort}`))));
  });
  const port = localPort(listenSocket);
  const metricsServer = await serveMetrics(config, gm.metrics, { instance: doorId });
  log.info('front door listening', { door: doorId, host, port, metrics_port: metricsServer?.port ?? null });

  return {
    port,
    doorId,
    stats: () => ({ inFlight, requests, byStatus: { ...byStatus } }),
    async close(graceMs = 30000) {
      draining = true;
      closeListenSocket(listenSocket);
      if (inFlight > 0) {
        await Promise.race([new Promise<void>((r) => (drained = r)), new Promise<void>((r) => setTimeout(r, graceMs).unref())]);
      }
      clearInterval(poolGauges);
      // jobs of clients that already left (cancelled, billing what was generated), usage flushed
      await local?.stop();
      dispatcher.stop();
      router.stop();
      await admission.close();
      await metricsServer?.close();
      if (!opts.tracer) await tracer.shutdown();
      await monitoring.stop().catch(() => {});
      keys.close();
      catalog.stop();
    },
  };
}
