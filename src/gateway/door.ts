import { randomBytes } from 'node:crypto';
import type { NatsConnection } from 'nats';
import { BatchRunner } from '../batch/runner.ts';
import { AdmissionBatcher } from '../billing/admission-batcher.ts';
import { Admission } from '../billing/admission.ts';
import { decodeJson, TenantChangedSchema } from '../bus/messages.ts';
import { registerMonitoring } from '../bus/monitoring.ts';
import { subjects } from '../bus/subjects.ts';
import { Catalog } from '../catalog/catalog.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { errors } from '../errors.ts';
import { createLogger } from '../log.ts';
import { serveMetrics } from '../metrics/http.ts';
import { tracerFromEnv, type Tracer } from '../tracing/tracer.ts';
import { VERSION } from '../version.ts';
import { Dispatcher, waitingByteBudgets } from './dispatcher.ts';
import { type ExchangeDeps, newRequestId } from './exchange.ts';
import { ClientAddresses } from '../auth/client-address.ts';
import { type ClientOf, KeyCache } from './key-cache.ts';
import { type LocalPools, startLocalPools } from './local-pools.ts';
import { createGatewayMetrics, type GatewayMetrics } from './metrics.ts';
import { type ResponseState, sendError } from './respond.ts';
import { StreamRouter } from './stream-router.ts';
import type { HttpRequest, HttpResponse } from './uws.ts';

const log = createLogger('gateway');

/**
 * How long a client may keep an idle connection to a door before reusing it: the `keep-alive:
 * timeout=5` hint every answer carries (respond.ts). A draining door waits this long after its
 * last answer, so a request a client sends on a connection it already holds is served, not refused.
 */
const KEEP_ALIVE_IDLE_MS = 5_000;

export interface DoorOptions {
  config: Config;
  db: Db;
  nc: NatsConnection;
  doorId?: string;
  portalUrl?: string;
  /** Spans of requests; default from OTEL_* (no export when unset). */
  tracer?: Tracer;
  /** The pool API keys are looked up on (KEY_LOOKUP_CONCURRENCY connections); default `db`. */
  keysDb?: Db;
}

/**
 * A front door's parts apart from its HTTP routes: key cache, catalog, stream router, admission,
 * dispatcher, in-process pools, monitoring; the count of requests in flight and the drain.
 */
export class Door {
  readonly id: string;
  readonly config: Config;
  readonly db: Db;
  readonly keys: KeyCache;
  readonly addresses: ClientAddresses;
  readonly catalog: Catalog;
  readonly deps: ExchangeDeps;
  /**
   * SIGTERM: no new connections (the listen socket is closed), `/healthz` answers 503 so a load
   * balancer takes the door out; a request on a connection the door already holds is still served,
   * and every answer closes its connection (the client's next one goes to another door).
   */
  draining = false;
  /** The drain is over (or timed out) and the parts are stopping: anything still arriving gets 503 `shutting_down`. */
  private closing = false;
  private lastAnswerAt = 0;
  private inFlight = 0;
  private requests = 0;
  private readonly byStatus: Record<number, number> = {};
  private drained: (() => void) | null = null;
  private readonly stops: Array<() => Promise<void> | void> = [];
  private metricsServer?: Awaited<ReturnType<typeof serveMetrics>>;
  private batchRunner?: BatchRunner;

  private constructor(
    private readonly o: DoorOptions,
    readonly metrics: GatewayMetrics,
    deps: ExchangeDeps,
  ) {
    this.id = deps.router.doorId;
    this.config = o.config;
    this.db = o.db;
    this.keys = deps.keys;
    this.addresses = new ClientAddresses(o.config.GATEWAY_TRUSTED_PROXIES);
    this.catalog = deps.catalog;
    this.deps = { ...deps, onFinish: (status, ttfbMs, startedAt, route) => this.ended(status, startedAt, ttfbMs, route) };
  }

  static async open(o: DoorOptions): Promise<Door> {
    const { config, db, nc } = o;
    const doorId = o.doorId ?? `gw${randomBytes(6).toString('hex')}`;
    const keys = new KeyCache(o.keysDb ?? db, {
      ttlMs: config.KEY_CACHE_TTL_MS,
      concurrency: config.KEY_LOOKUP_CONCURRENCY,
      unknownPerMinute: config.GATEWAY_UNKNOWN_KEYS_PER_MINUTE,
    });
    keys.listen(nc);
    const catalog = new Catalog(db);
    await catalog.start(nc);
    const router = new StreamRouter(nc, doorId, config.STREAM_IDLE_TIMEOUT_MS);
    router.start();
    const admission = new Admission(db, new AdmissionBatcher(db), {
      doorId,
      windowMs: config.ADMISSION_LEASE_MS,
      richness: config.ADMISSION_LEASE_RICHNESS,
      leaseAfter: config.ADMISSION_LEASE_AFTER,
      holdTtlMs: config.REQUEST_TIMEOUT_MS + config.HOLD_GRACE_MS,
      onError: (what, err) => log.warn(what, { err: err as Error }),
    });
    keys.onInvalidate((keyId) => admission.invalidateKey(keyId));
    // a suspended tenant is refused by admission in PostgreSQL; its leases here must stop too
    const tenantSub = nc.subscribe(subjects.tenantChanged, {
      callback: (_err, msg) => {
        const parsed = TenantChangedSchema.safeParse(safeDecode(msg.data));
        if (parsed.success) admission.invalidateTenant(parsed.data.tenant_id);
      },
    });
    let door: Door | undefined;
    const metrics = createGatewayMetrics(
      () => door?.inFlight ?? 0,
      () => router.size,
      admission,
      () => dispatcher.depth(),
      keys,
    );
    const dispatcher = new Dispatcher(nc, {
      maxWaitMs: config.DISPATCH_WAIT_MS,
      maxQueued: config.DISPATCH_MAX_WAITING,
      maxPerTenant: config.DISPATCH_MAX_WAITING_PER_TENANT,
      ...waitingByteBudgets(config),
      onWait: (pool, ms) => metrics.waited(pool, ms),
    });
    const tracer = o.tracer ?? tracerFromEnv('catraca-gateway');
    const deps: ExchangeDeps = { config, db, nc, keys, catalog, router, portalUrl: o.portalUrl, tracer, admission, dispatcher, metrics };
    door = new Door(o, metrics, deps);
    door.stops.push(() => tenantSub.unsubscribe());
    await door.startParts(dispatcher, admission, router, tracer);
    return door;
  }

  private async startParts(dispatcher: Dispatcher, admission: Admission, router: StreamRouter, tracer: Tracer): Promise<void> {
    const { config, nc } = this.o;
    const local: LocalPools | undefined = await startLocalPools({
      config,
      nc,
      catalog: this.catalog,
      router,
      doorId: this.id,
      tracer,
      metrics: this.metrics.metrics,
      onFree: (pools) => dispatcher.localFree(pools),
      log,
    });
    this.deps.local = local?.worker;
    const monitoring = await registerMonitoring(nc, { name: 'catraca-gateway', version: VERSION, instanceId: this.id, metrics: this.metrics.metrics });
    dispatcher.start();
    const batchRunner = new BatchRunner({ config, db: this.db, deps: this.deps, inFlight: () => this.inFlight }, nc);
    batchRunner.start();
    this.batchRunner = batchRunner;
    const poolGauges = setInterval(() => this.metrics.trackPools(), 1000);
    poolGauges.unref();
    this.metricsServer = await serveMetrics(config, this.metrics.metrics, { instance: this.id });
    // in the order close() runs them: jobs of clients that already left (cancelled, billing what
    // was generated), then usage flushed, then the rest
    this.stops.push(
      () => batchRunner.stop(),
      () => clearInterval(poolGauges),
      async () => await local?.stop(),
      () => dispatcher.stop(),
      () => router.stop(),
      () => admission.close(),
      async () => await this.metricsServer?.close(),
      async () => {
        if (!this.o.tracer) await tracer.shutdown();
      },
      () => monitoring.stop().catch(() => {}),
      () => this.keys.close(),
      () => this.catalog.stop(),
    );
  }

  /** The runner of batches' lines (`queue` mode), which also creates and cancels batches. */
  batches(): BatchRunner {
    if (!this.batchRunner) throw errors.internal();
    return this.batchRunner;
  }

  get metricsPort(): number | null {
    return this.metricsServer?.port ?? null;
  }

  /** A new request's response state. */
  begin(res: HttpResponse): ResponseState {
    this.requests++;
    return { res, requestId: newRequestId(), aborted: false, done: false, closeConnection: this.draining };
  }

  /**
   * The client of the request being handled, for the limits per address (uWS gives the peer and
   * the headers only during the handler's synchronous part: call it there, or not at all).
   */
  clientOf(res: HttpResponse, req: HttpRequest): ClientOf {
    return () => {
      const peer = Buffer.from(res.getRemoteAddressAsText()).toString();
      return this.addresses.keyOf(peer, this.addresses.readsForwardedFor ? req.getHeader('x-forwarded-for') : '');
    };
  }

  /** A request that holds the door open until it ends (the drain waits for it). */
  enter(): void {
    this.inFlight++;
  }

  /** Counts an answer that was not an exchange's (those count through `deps.onFinish`). */
  track(status: number, route = 'other'): void {
    this.lastAnswerAt = Date.now();
    this.byStatus[status] = (this.byStatus[status] ?? 0) + 1;
    this.metrics.answered(status, Date.now(), null, route);
  }

  /** An entered request ended. */
  leave(status: number, route: string): void {
    this.track(status, route);
    this.exit();
  }

  private ended(status: number, startedAt: number, ttfbMs: number | null, route: string): void {
    this.lastAnswerAt = Date.now();
    this.byStatus[status] = (this.byStatus[status] ?? 0) + 1;
    this.metrics.answered(status, startedAt, ttfbMs, route);
    this.exit();
  }

  private exit(): void {
    this.inFlight--;
    if (this.draining && this.inFlight === 0) this.drained?.();
  }

  /** 503 once the drain is over and the door is closing: the request is answered and counted here. */
  refuseIfDraining(s: ResponseState, send: (s: ResponseState, err: unknown) => void = sendError): boolean {
    if (!this.closing) return false;
    this.track(503);
    send(s, errors.shuttingDown());
    return true;
  }

  stats() {
    return { inFlight: this.inFlight, requests: this.requests, byStatus: { ...this.byStatus } };
  }

  /**
   * The drain (the listen socket is already closed): waits, up to `graceMs` in all, until no
   * request is in flight and no client can still reuse a kept-alive connection (KEEP_ALIVE_IDLE_MS
   * after the last answer; every answer that is not a stream closes its connection from now on —
   * a stream's headers are already out, so it ends keeping its connection, which the idle wait covers),
   * then stops every part. What arrives after that is refused with 503 `shutting_down`.
   */
  async close(graceMs: number): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + graceMs;
    for (;;) {
      const now = Date.now();
      if (now >= deadline) break;
      if (this.inFlight > 0) {
        await new Promise<void>((r) => {
          const timer = setTimeout(r, deadline - now);
          timer.unref();
          this.drained = () => {
            clearTimeout(timer);
            r();
          };
        });
        this.drained = null;
        continue;
      }
      const idleUntil = this.lastAnswerAt + KEEP_ALIVE_IDLE_MS;
      if (now >= idleUntil) break;
      await new Promise<void>((r) => setTimeout(r, Math.min(idleUntil, deadline) - now).unref());
    }
    this.closing = true;
    if (this.inFlight > 0) log.warn('drain timed out: cutting what is still in flight', { door: this.id, in_flight: this.inFlight, grace_ms: graceMs });
    for (const stop of this.stops) await stop();
  }
}

function safeDecode(data: Uint8Array): unknown {
  try {
    return decodeJson(data);
  } catch {
    return null;
  }
}
