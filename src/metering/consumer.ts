import { AckPolicy, DeliverPolicy, type JsMsg, type NatsConnection, type ConsumerMessages } from 'nats';
import type { Db } from '../db/pool.ts';
import { openHolds, settle, settleBatch, sweepExpiredHolds, type Settlement, type SettleResult } from '../billing/ledger.ts';
import { costMicros } from '../billing/money.ts';
import { decodeJson, UsageMessageSchema, type UsageMessage } from '../bus/messages.ts';
import { ensureUsageStream, watchUsageBacklog, type UsageStreamSettings } from '../bus/usage-stream.ts';
import { METERING_DURABLE, subjects, USAGE_STREAM } from '../bus/subjects.ts';
import { createLogger } from '../log.ts';
import { VERSION } from '../version.ts';
import { HEADLINE, registerMonitoring, sanitizeInstanceId } from '../bus/monitoring.ts';
import { createMetrics, type Metrics } from '../metrics/registry.ts';
import { tracerFromEnv, type Span, type Tracer } from '../tracing/tracer.ts';

const log = createLogger('metering');

export interface MeteringOptions {
  nc: NatsConnection;
  db: Db;
  /** Usage messages settled per PostgreSQL transaction (at most). */
  batch?: number;
  /** Settlement transactions running at once. */
  concurrency?: number;
  /**
   * How long a lone message waits for others to join its batch. One transaction (and WAL flush)
   * per request at low load costs more CPU, in PostgreSQL and here, than a few ms of metering lag.
   */
  lingerMs?: number;
  sweepIntervalMs?: number;
  ackWaitMs?: number;
  instanceId?: string;
  /** USAGE stream settings (default: from the environment) */
  stream?: UsageStreamSettings;
  /** USAGE_BACKLOG_ALARM (0: no alarm) and how often the backlog is checked */
  backlogAlarm?: number;
  backlogIntervalMs?: number;
  /** One span per settled usage message (`settle`), child of the worker's; default from OTEL_* (no export when unset). */
  tracer?: Tracer;
}

export interface MeteringStats {
  settled: number;
  duplicates: number;
  failures: number;
  poison: number;
  swept: number;
  inFlight: number;
  /** ms from the worker's end of request to the ledger commit, last settled message */
  lastLagMs: number;
  maxLagMs: number;
  openHolds: number;
  openLeases: number;
}

export interface Metering {
  /** the instance id it registered for monitoring */
  instanceId: string;
  stats(): MeteringStats;
  metrics: Metrics;
  stop(): Promise<void>;
}

export async function ensureMeteringConsumer(nc: NatsConnection, ackWaitMs = 10000, stream: UsageStreamSettings = {}): Promise<void> {
  await ensureUsageStream(nc, stream);
  const jsm = await nc.jetstreamManager();
  const config = {
    durable_name: METERING_DURABLE,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: subjects.usageWildcard,
    ack_wait: ackWaitMs * 1e6,
    max_deliver: -1,
    max_ack_pending: 20000,
  };
  let exists = true;
  try {
    await jsm.consumers.info(USAGE_STREAM, METERING_DURABLE);
  } catch {
    exists = false;
  }
  if (exists) await jsm.consumers.update(USAGE_STREAM, METERING_DURABLE, { ack_wait: config.ack_wait, max_ack_pending: config.max_ack_pending });
  else await jsm.consumers.add(USAGE_STREAM, config).catch(async (err) => {
    // another metering instance created it first
    if (!String(err.message).includes('already')) throw err;
  });
}

/**
 * The durable consumer of USAGE: each message settles its request in one PostgreSQL transaction
 * (catraca_settle, idempotent on request id) and is acked only after the commit, so a crash at
 * any point means redelivery, and redelivery means at most a 'duplicate' no-op.
 */
export async function startMetering(opts: MeteringOptions): Promise<Metering> {
  const { nc, db } = opts;
  // Batches in flight at once, and messages per batch (one PostgreSQL transaction each).
  const concurrency = opts.concurrency ?? 2;
  const batchSize = opts.batch ?? 128;
  const lingerMs = opts.lingerMs ?? 20;
  const tracer = opts.tracer ?? tracerFromEnv('catraca-metering');
  await ensureMeteringConsumer(nc, opts.ackWaitMs, opts.stream);
  const js = nc.jetstream();
  const consumer = await js.consumers.get(USAGE_STREAM, METERING_DURABLE);
  const stats: MeteringStats = { settled: 0, duplicates: 0, failures: 0, poison: 0, swept: 0, inFlight: 0, lastLagMs: 0, maxLagMs: 0, openHolds: 0, openLeases: 0 };
  let heldMicros = { holds: 0, leases: 0 };
  const metrics = createMetrics();
  metrics.gauge(HEADLINE.inflight, 'Usage messages being settled', {}, () => buffer.length + flushing);
  metrics.gauge('catraca_open_holds', 'Per-request holds not yet settled or swept', {}, () => stats.openHolds);
  metrics.gauge('catraca_open_leases', 'Balance leases not yet closed or swept', {}, () => stats.openLeases);
  metrics.gauge('catraca_held_micros', 'Sum of open holds (kind="request") and leases (kind="lease"), micro-BRL', { kind: 'request' }, () => heldMicros.holds);
  metrics.gauge('catraca_held_micros', 'Sum of open holds (kind="request") and leases (kind="lease"), micro-BRL', { kind: 'lease' }, () => heldMicros.leases);
  const mx = {
    jobs: metrics.counter(HEADLINE.jobs, 'Usage messages settled (acked)'),
    errors: metrics.counter(HEADLINE.errors, 'Settle failures (nak/term)'),
    lag: metrics.histogram(HEADLINE.latency, 'Metering lag: usage ended_at to ledger commit, seconds'),
    lagNamed: metrics.histogram('catraca_metering_lag_seconds', 'Usage ended_at to ledger row committed, seconds'),
    settled: metrics.counter('catraca_usage_settled_total', 'Usage messages settled, by status: settled (debited once) or duplicate (already settled, a no-op)', { status: 'settled' }),
    duplicates: metrics.counter('catraca_usage_settled_total', 'Usage messages settled, by status: settled (debited once) or duplicate (already settled, a no-op)', { status: 'duplicate' }),
    swept: metrics.counter('catraca_holds_swept_total', 'Expired holds released by the sweeper'),
  };
  // The backlog before the first pull: what waited while metering was away (alarm logged at once).
  const backlog = watchUsageBacklog(nc, { threshold: opts.backlogAlarm ?? 10000, intervalMs: opts.backlogIntervalMs ?? 5000, metrics, log });
  const atStart = await backlog.check();
  if (atStart && atStart.messages > 0) log.info('usage waiting to be settled', { backlog: atStart.messages });
  let stopping = false;
  let messages: ConsumerMessages | undefined;
  const running = new Set<Promise<void>>();

  /** Parses a message; an unreadable one is terminated (it can never settle). */
  type Item = { msg: JsMsg; usage: UsageMessage; settlement: Settlement; span?: Span };
  const parse = (msg: JsMsg): Item | null => {
    try {
      const usage = UsageMessageSchema.parse(decodeJson(msg.data));
      const costMicros_ = costMicros(usage.prompt_tokens, usage.completion_tokens, { input: BigInt(usage.input_price), output: BigInt(usage.output_price) });
      return {
        msg,
        usage,
        settlement: {
          requestId: usage.request_id, tenantId: usage.tenant_id, keyId: usage.key_id, costMicros: costMicros_, model: usage.model,
          inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens, estimated: usage.estimated, outcome: usage.outcome,
          at: new Date(usage.ended_at),
          hold: usage.hold ?? null,
        },
      };
    } catch (err) {
      stats.poison++;
      mx.errors.inc();
      log.error('unreadable usage message: terminated', { seq: msg.seq, err: err as Error });
      msg.term();
      return null;
    }
  };

  /** Acks (after the commit) or terminates one message according to its settlement result. */
  const conclude = async (item: Item, result: SettleResult): Promise<void> => {
    const { msg, usage, settlement } = item;
    item.span?.setAttributes({ 'catraca.settle_status': result.status, 'catraca.debited_micros': Number(result.debited ?? 0), 'catraca.redelivered': msg.redelivered });
    if (result.status === 'unknown_tenant') item.span?.setStatus('error', 'unknown tenant');
    item.span?.end();
    if (result.status === 'duplicate') {
      stats.duplicates++;
      mx.duplicates.inc();
    } else if (result.status === 'settled') {
      stats.settled++;
      mx.settled.inc();
      stats.lastLagMs = Date.now() - usage.ended_at;
      mx.lag.observe(stats.lastLagMs / 1000);
      mx.lagNamed.observe(stats.lastLagMs / 1000);
      if (stats.lastLagMs > stats.maxLagMs) stats.maxLagMs = stats.lastLagMs;
      if (result.debited < settlement.costMicros) log.warn('shortfall: cost exceeded available balance', { request_id: usage.request_id, cost: settlement.costMicros.toString(), debited: result.debited.toString() });
    } else {
      stats.poison++;
      mx.errors.inc();
      log.error('usage for unknown tenant: terminated', { request_id: usage.request_id, tenant_id: usage.tenant_id });
      msg.term();
      return;
    }
    mx.jobs.inc();
    // A plain ack, not a confirmed one: a lost ack means a redelivery, and a redelivered message
    // settles as a 'duplicate' no-op, so waiting for the server's confirmation buys nothing.
    msg.ack();
  };

  /**
   * Settles a batch in one transaction (one WAL flush). If the batch fails as a whole, each
   * message is retried alone so one bad message cannot hold the others back.
   */
  const settleMessages = async (msgs: JsMsg[]): Promise<void> => {
    const items = msgs.map(parse).filter((x) => x !== null);
    if (items.length === 0) return;
    // one span per usage message (the request), child of the worker's job span
    for (const item of items) {
      item.span = tracer.startSpan('settle', {
        parent: item.msg.headers?.get('traceparent'),
        kind: 'consumer',
        attributes: { 'catraca.request_id': item.usage.request_id, 'catraca.tenant_id': item.usage.tenant_id, 'catraca.batch_size': items.length },
      });
    }
    try {
      const results = items.length === 1 ? [await settle(db, items[0].settlement)] : await settleBatch(db, items.map((i) => i.settlement));
      await Promise.all(items.map((item, i) => conclude(item, results[i])));
      return;
    } catch (err) {
      if (items.length === 1) {
        stats.failures++;
        mx.errors.inc();
        log.warn('settlement failed; will be redelivered', { request_id: items[0].usage.request_id, err: err as Error });
        items[0].span?.setStatus('error', 'settlement failed; redelivered').end();
        items[0].msg.nak(1000);
        return;
      }
      log.warn('batch settlement failed; settling one by one', { size: items.length, err: err as Error });
    }
    for (const item of items) await settleMessages([item.msg]);
  };

  const buffer: JsMsg[] = [];
  let flushing = 0;
  let lingering: NodeJS.Timeout | undefined;
  /**
   * Starts settlement batches while fewer than `concurrency` run; what arrives meanwhile waits and
   * goes together. A batch smaller than `batchSize` starts only after `lingerMs`.
   */
  const kick = () => {
    if (buffer.length > 0 && buffer.length < batchSize && lingerMs > 0 && !stopping) {
      lingering ??= setTimeout(() => {
        lingering = undefined;
        start();
      }, lingerMs);
      stats.inFlight = buffer.length + flushing;
      return;
    }
    start();
  };
  const start = () => {
    if (lingering && buffer.length >= batchSize) {
      clearTimeout(lingering);
      lingering = undefined;
    }
    while (flushing < concurrency && buffer.length > 0) {
      const batch = buffer.splice(0, batchSize);
      flushing++;
      const p: Promise<void> = settleMessages(batch).finally(() => {
        flushing--;
        running.delete(p);
        stats.inFlight = buffer.length + flushing;
        if (buffer.length > 0) start();
      });
      running.add(p);
    }
    stats.inFlight = buffer.length + flushing;
  };

  const loop = async () => {
    while (!stopping) {
      try {
        // expires 2 s (nats.js default 30 s): after a NATS node is lost, nats.js re-checks the
        // consumer and re-pulls at this period, so settlement resumes within seconds of the new
        // JetStream leader instead of ~30 s later (test/cluster.test.ts).
        messages = await consumer.consume({ max_messages: batchSize * 2, expires: 2000 });
        for await (const msg of messages) {
          buffer.push(msg);
          kick();
          while (buffer.length >= batchSize * 4) await Promise.race(running);
          if (stopping) break;
        }
      } catch (err) {
        if (stopping) break;
        log.warn('consumer interrupted; resuming', { err: err as Error });
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  };
  const looping = loop();

  const sweep = async () => {
    try {
      const n = await sweepExpiredHolds(db);
      const open = await openHolds(db);
      stats.openHolds = open.holds.count;
      stats.openLeases = open.leases.count;
      heldMicros = { holds: Number(open.holds.micros), leases: Number(open.leases.micros) };
      if (n > 0) {
        stats.swept += n;
        mx.swept.inc(n);
        log.warn('released expired holds', { count: n });
      }
    } catch (err) {
      log.warn('hold sweep failed', { err: err as Error });
    }
  };
  const sweeper = setInterval(sweep, opts.sweepIntervalMs ?? 10000);
  sweeper.unref();
  void sweep();
  const instanceId = sanitizeInstanceId(opts.instanceId ?? `metering-${process.pid}`);
  const monitoring = await registerMonitoring(nc, { name: 'catraca-metering', version: VERSION, instanceId, metrics });

  return {
    instanceId,
    stats: () => ({ ...stats }),
    metrics,
    async stop() {
      stopping = true;
      if (lingering) {
        clearTimeout(lingering);
        lingering = undefined;
        start();
      }
      clearInterval(sweeper);
      backlog.stop();
      await monitoring.stop().catch(() => {});
      await messages?.close().catch(() => {});
      // settle what was already pulled rather than leave it to redelivery
      while (running.size > 0) await Promise.allSettled([...running]);
      await Promise.race([looping, new Promise((r) => setTimeout(r, 2000))]);
      if (!opts.tracer) await tracer.shutdown();
    },
  };
}
