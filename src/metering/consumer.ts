import { AckPolicy, type Consumer, DeliverPolicy, type JsMsg, type NatsConnection, type ConsumerMessages } from 'nats';
import { LingerBatcher } from './linger-batcher.ts';
import { type MeteringStats, UsageSettler } from './settler.ts';
import type { Db } from '../db/pool.ts';
import { openHolds, sweepExpiredHolds } from '../billing/ledger.ts';
import { sweepExpiredFiles } from '../batch/files.ts';
import { type BatchSweepSettings, deleteOldBatches, expireStuckBatches } from '../batch/sweeper.ts';
import { sweepExpiredResponses } from '../db/responses.ts';
import { ensureUsageStream, watchUsageBacklog, type UsageStreamSettings } from '../bus/usage-stream.ts';
import { ensureUsageLog, journalUsage } from '../bus/usage-log.ts';
import { METERING_DURABLE, subjects, USAGE_STREAM } from '../bus/subjects.ts';
import { encode } from '../bus/messages.ts';
import { createLogger } from '../log.ts';
import { VERSION } from '../version.ts';
import { HEADLINE, registerMonitoring, sanitizeInstanceId } from '../bus/monitoring.ts';
import { createMetrics, type Metrics } from '../metrics/registry.ts';
import { tracerFromEnv, type Tracer } from '../tracing/tracer.ts';
import { SettlementWatch } from '../notify/settled.ts';

const log = createLogger('metering');

export type { MeteringStats };

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
  /** BATCH_RETENTION_DAYS and the BATCH queue's ack wait (default 30 days, 10 min + 90 s): the batches' sweep (src/batch/sweeper.ts) */
  batches?: BatchSweepSettings;
  ackWaitMs?: number;
  instanceId?: string;
  /** USAGE stream settings (default: from the environment) */
  stream?: UsageStreamSettings;
  /** USAGE_LOG_RETENTION_DAYS and USAGE_LOG_MAX_BYTES (default 8 days, 4 GiB) */
  usageLog?: { retentionDays?: number; maxBytes?: number };
  /** USAGE_BACKLOG_ALARM (0: no alarm) and how often the backlog is checked */
  backlogAlarm?: number;
  backlogIntervalMs?: number;
  /** One span per settled usage message (`settle`), child of the worker's; default from OTEL_* (no export when unset). */
  tracer?: Tracer;
}

export interface Metering {
  /** the instance id it registered for monitoring */
  instanceId: string;
  stats(): MeteringStats;
  metrics: Metrics;
  stop(): Promise<void>;
}

export async function ensureMeteringConsumer(
  nc: NatsConnection,
  ackWaitMs = 10000,
  stream: UsageStreamSettings = {},
  usageLog: MeteringOptions['usageLog'] = {},
): Promise<void> {
  const usage = await ensureUsageStream(nc, stream);
  await ensureUsageLog(nc, {
    replicas: Math.max(1, usage.replicas),
    retentionDays: usageLog.retentionDays ?? 8,
    maxBytes: usageLog.maxBytes ?? 4 * 1024 ** 3,
  });
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
  else
    await jsm.consumers.add(USAGE_STREAM, config).catch(async (err) => {
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
  const batchSize = opts.batch ?? 128;
  const tracer = opts.tracer ?? tracerFromEnv('catraca-metering');
  await ensureMeteringConsumer(nc, opts.ackWaitMs, opts.stream, opts.usageLog);
  const js = nc.jetstream();
  const consumer = await js.consumers.get(USAGE_STREAM, METERING_DURABLE);
  const stats: MeteringStats = {
    settled: 0,
    duplicates: 0,
    failures: 0,
    poison: 0,
    swept: 0,
    inFlight: 0,
    lastLagMs: 0,
    maxLagMs: 0,
    openHolds: 0,
    openLeases: 0,
  };
  const metrics = createMetrics();
  // balance.low, balance.depleted, key.limit_reached: checked after each commit, off the settlement path
  const notify = new SettlementWatch(db, nc, log);
  const settler = new UsageSettler(
    db,
    tracer,
    stats,
    metrics,
    log,
    (tenantId) => nc.publish(subjects.tenantChanged, encode({ tenant_id: tenantId })),
    (tenants, keys) => notify.add(tenants, keys),
    // every settled message is copied to USAGE_LOG before its ack (a restored ledger replays it)
    (msgs) => journalUsage(nc, msgs),
  );
  // Batches in flight at once (`concurrency`), messages per batch (one PostgreSQL transaction each).
  const batcher = new LingerBatcher<JsMsg>((batch) => settler.settle(batch), { batchSize, concurrency: opts.concurrency ?? 2, lingerMs: opts.lingerMs ?? 20 });
  metrics.gauge(HEADLINE.inflight, 'Usage messages being settled', {}, () => batcher.size);
  // The backlog before the first pull: what waited while metering was away (alarm logged at once).
  const backlog = watchUsageBacklog(nc, { threshold: opts.backlogAlarm ?? 10000, intervalMs: opts.backlogIntervalMs ?? 5000, metrics, log });
  const atStart = await backlog.check();
  if (atStart && atStart.messages > 0) log.info('usage waiting to be settled', { backlog: atStart.messages });
  const pulling = pullUsage(consumer, batcher, batchSize);
  const batchSweep = opts.batches ?? { retentionDays: 30, ackWaitMs: 690_000 };
  const sweeper = startSweeper(db, stats, metrics, opts.sweepIntervalMs ?? 10000, batchSweep, () => {
    notify.retry();
    void notify.reconcile();
  });
  const instanceId = sanitizeInstanceId(opts.instanceId ?? `metering-${process.pid}`);
  const monitoring = await registerMonitoring(nc, { name: 'catraca-metering', version: VERSION, instanceId, metrics });

  return {
    instanceId,
    stats: () => ({ ...stats, inFlight: batcher.size }),
    metrics,
    async stop() {
      sweeper.stop();
      backlog.stop();
      await monitoring.stop().catch(() => {});
      await pulling.stop();
      // settle what was already pulled rather than leave it to redelivery
      await batcher.close();
      await pulling.done(2000);
      await notify.idle();
      if (!opts.tracer) await tracer.shutdown();
    },
  };
}

/** Pulls usage messages into the batcher until stopped, resuming after interruptions. */
function pullUsage(consumer: Consumer, batcher: LingerBatcher<JsMsg>, batchSize: number) {
  let stopping = false;
  let messages: ConsumerMessages | undefined;
  const loop = async () => {
    while (!stopping) {
      try {
        // expires 2 s (nats.js default 30 s): after a NATS node is lost, nats.js re-checks the
        // consumer and re-pulls at this period, so settlement resumes within seconds of the new
        // JetStream leader instead of ~30 s later (test/cluster.test.ts).
        messages = await consumer.consume({ max_messages: batchSize * 2, expires: 2000 });
        for await (const msg of messages) {
          batcher.push(msg);
          while (batcher.waiting >= batchSize * 4) await batcher.oneDone();
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
  return {
    async stop() {
      stopping = true;
      await messages?.close().catch(() => {});
    },
    done: (ms: number) => Promise.race([looping, new Promise((r) => setTimeout(r, ms))]),
  };
}

/**
 * Holds and leases whose request never settled (a worker or front door died) are released after
 * their expiry, and the open ones counted for /metrics and `catraca status`; stored responses past
 * their retention are deleted, and files of the Files API past BATCH_RETENTION_DAYS (at most 1000 and 100 a pass: a backlog drains over a few passes); batches past their window that no runner will end are ended, and the rows of batches ended BATCH_RETENTION_DAYS ago deleted (src/batch/sweeper.ts); notification
 * checks that failed are tried again, and a page of the notifications' reconciling sweep runs (`onSweep`).
 */
function startSweeper(db: Db, stats: MeteringStats, metrics: Metrics, intervalMs: number, batches: BatchSweepSettings, onSweep: () => void) {
  let heldMicros = { holds: 0, leases: 0 };
  metrics.gauge('catraca_open_holds', 'Per-request holds not yet settled or swept', {}, () => stats.openHolds);
  metrics.gauge('catraca_open_leases', 'Balance leases not yet closed or swept', {}, () => stats.openLeases);
  metrics.gauge('catraca_held_micros', 'Sum of open holds (kind="request") and leases (kind="lease"), micro-BRL', { kind: 'request' }, () => heldMicros.holds);
  metrics.gauge('catraca_held_micros', 'Sum of open holds (kind="request") and leases (kind="lease"), micro-BRL', { kind: 'lease' }, () => heldMicros.leases);
  const swept = metrics.counter('catraca_holds_swept_total', 'Expired holds released by the sweeper');
  const expiredResponses = metrics.counter('catraca_responses_expired_total', 'Stored responses (POST /v1/responses) deleted after their retention');
  const expiredFiles = metrics.counter('catraca_batch_files_expired_total', 'Files of the Files API deleted after BATCH_RETENTION_DAYS');
  const expiredBatches = metrics.counter('catraca_batches_expired_total', 'Batches past their window ended by the sweeper (no runner would end them)');
  const deletedBatches = metrics.counter('catraca_batches_deleted_total', 'Batches (and their lines) deleted BATCH_RETENTION_DAYS after they ended');
  const sweep = async () => {
    onSweep();
    try {
      const n = await sweepExpiredHolds(db);
      const open = await openHolds(db);
      stats.openHolds = open.holds.count;
      stats.openLeases = open.leases.count;
      heldMicros = { holds: Number(open.holds.micros), leases: Number(open.leases.micros) };
      if (n > 0) {
        stats.swept += n;
        swept.inc(n);
        log.warn('released expired holds', { count: n });
      }
    } catch (err) {
      log.warn('hold sweep failed', { err: err as Error });
    }
    try {
      expiredResponses.inc(await sweepExpiredResponses(db));
    } catch (err) {
      log.warn('responses sweep failed', { err: err as Error });
    }
    try {
      expiredFiles.inc(await sweepExpiredFiles(db));
    } catch (err) {
      log.warn('files sweep failed', { err: err as Error });
    }
    try {
      expiredBatches.inc(await expireStuckBatches(db, batches));
      deletedBatches.inc(await deleteOldBatches(db, batches.retentionDays));
    } catch (err) {
      log.warn('batches sweep failed', { err: err as Error });
    }
  };
  const timer = setInterval(sweep, intervalMs);
  timer.unref();
  void sweep();
  return { stop: () => clearInterval(timer) };
}
