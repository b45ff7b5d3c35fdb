import { loadConfig } from '../config.ts';
import { createPool } from '../db/pool.ts';
import { connectBus } from '../bus/connect.ts';
import { configureLogging, createLogger, logCrashes } from '../log.ts';
import { onShutdown, quietly } from '../process/shutdown.ts';
import { startGateway } from './server.ts';
import { assertNativeUws, uwsRuntime } from './uws.ts';

const log = createLogger('gateway');
logCrashes(log);
// Never serve on uWebSockets.js's JavaScript fallback (Node 22/24 without the official build).
try {
  assertNativeUws();
} catch (err) {
  log.error('refusing to start', { reason: (err as Error).message, node: process.versions.node, uws: uwsRuntime.package });
  process.stderr.write(`catraca front door: ${(err as Error).message}\n`);
  process.exit(1);
}
if (uwsRuntime.officialError)
  log.warn('the official uWebSockets.js is installed but did not load; using @trufflesuite/uws-js-unofficial', { reason: uwsRuntime.officialError });
const config = loadConfig();
configureLogging({ level: config.LOG_LEVEL, format: config.LOG_FORMAT });
// The front door writes only holds (reservations) and reads; see PoolOptions.asyncCommit.
const db = createPool(config.DATABASE_URL, config.DB_POOL_SIZE, {
  asyncCommit: true,
  connectTimeoutMs: config.DB_CONNECT_TIMEOUT_MS,
  statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
});
// API keys are looked up on a small pool of their own: a flood of unknown keys never takes admission's connections.
const keysDb = createPool(config.DATABASE_URL, config.KEY_LOOKUP_CONCURRENCY, {
  connectTimeoutMs: config.DB_CONNECT_TIMEOUT_MS,
  statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
});
const nc = await connectBus(config.NATS_URL, `catraca-gateway ${config.CATRACA_INSTANCE ?? process.pid}`);
const gateway = await startGateway({ config, db, keysDb, nc, doorId: config.CATRACA_INSTANCE, portalUrl: config.PORTAL_PUBLIC_URL });

onShutdown(
  log,
  async () => {
    await gateway.close(config.DRAIN_TIMEOUT_MS);
    await quietly(nc.drain());
    await quietly(db.end());
    await quietly(keysDb.end());
  },
  { forceAfterMs: config.DRAIN_TIMEOUT_MS + 10_000, describe: () => ({ in_flight: gateway.stats().inFlight }) },
);
