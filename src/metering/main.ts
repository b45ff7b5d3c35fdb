import { loadConfig } from '../config.ts';
import { createPool } from '../db/pool.ts';
import { connectBus } from '../bus/connect.ts';
import { createLogger, logCrashes } from '../log.ts';
import { startMetering } from './consumer.ts';
import { serveMetrics } from '../metrics/http.ts';

const log = createLogger('metering');
logCrashes(log);
const config = loadConfig();
const db = createPool(config.DATABASE_URL, 20, { connectTimeoutMs: config.DB_CONNECT_TIMEOUT_MS, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
const nc = await connectBus(config.NATS_URL, `catraca-metering ${config.CATRACA_INSTANCE ?? process.pid}`);
const metering = await startMetering({ nc, db, batch: config.METERING_BATCH, lingerMs: config.METERING_LINGER_MS, sweepIntervalMs: config.HOLD_SWEEP_INTERVAL_MS, ackWaitMs: config.METERING_ACK_WAIT_MS, instanceId: config.CATRACA_INSTANCE,
  stream: { maxBytes: config.USAGE_MAX_BYTES }, backlogAlarm: config.USAGE_BACKLOG_ALARM, backlogIntervalMs: config.USAGE_BACKLOG_INTERVAL_MS });
const metricsServer = await serveMetrics(config, metering.metrics, { instance: metering.instanceId });
log.info('metering consumer running', { instance: metering.instanceId, metrics_port: metricsServer?.port ?? null });

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  log.info('shutting down: finishing in-flight settlements', { signal });
  await metering.stop();
  await metricsServer?.close().catch(() => {});
  await nc.drain().catch(() => {});
  await db.end().catch(() => {});
  log.info('stopped', { ...metering.stats() });
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
