import { loadConfig } from '../config.ts';
import { createPool } from '../db/pool.ts';
import { connectBus } from '../bus/connect.ts';
import { configureLogging, createLogger, logCrashes } from '../log.ts';
import { onShutdown, quietly } from '../process/shutdown.ts';
import { startMetering } from './consumer.ts';
import { batchAckWaitMs } from '../batch/ending.ts';
import { serveMetrics } from '../metrics/http.ts';

const log = createLogger('metering');
logCrashes(log);
const config = loadConfig();
configureLogging({ level: config.LOG_LEVEL, format: config.LOG_FORMAT });
const db = createPool(config.DATABASE_URL, config.DB_POOL_SIZE, {
  connectTimeoutMs: config.DB_CONNECT_TIMEOUT_MS,
  statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
});
const nc = await connectBus(config.NATS_URL, `catraca-metering ${config.CATRACA_INSTANCE ?? process.pid}`);
const metering = await startMetering({
  nc,
  db,
  batch: config.METERING_BATCH,
  lingerMs: config.METERING_LINGER_MS,
  sweepIntervalMs: config.HOLD_SWEEP_INTERVAL_MS,
  batches: { retentionDays: config.BATCH_RETENTION_DAYS, ackWaitMs: batchAckWaitMs(config) },
  ackWaitMs: config.METERING_ACK_WAIT_MS,
  instanceId: config.CATRACA_INSTANCE,
  stream: { maxBytes: config.USAGE_MAX_BYTES },
  usageLog: { retentionDays: config.USAGE_LOG_RETENTION_DAYS, maxBytes: config.USAGE_LOG_MAX_BYTES },
  backlogAlarm: config.USAGE_BACKLOG_ALARM,
  backlogIntervalMs: config.USAGE_BACKLOG_INTERVAL_MS,
});
const metricsServer = await serveMetrics(config, metering.metrics, { instance: metering.instanceId });
log.info('metering consumer running', { instance: metering.instanceId, metrics_port: metricsServer?.port ?? null });

onShutdown(
  log,
  async () => {
    await metering.stop();
    await quietly(metricsServer?.close());
    await quietly(nc.drain());
    await quietly(db.end());
  },
  { forceAfterMs: config.DRAIN_TIMEOUT_MS + 10_000, summary: () => ({ ...metering.stats() }) },
);
