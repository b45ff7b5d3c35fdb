import { loadConfig } from '../config.ts';
import { createPool } from '../db/pool.ts';
import { connectBus } from '../bus/connect.ts';
import { createLogger } from '../log.ts';
import { startGateway } from './server.ts';

const log = createLogger('gateway');
const config = loadConfig();
// The front door writes only holds (reservations) and reads; see PoolOptions.asyncCommit.
const db = createPool(config.DATABASE_URL, 20, { asyncCommit: true });
const nc = await connectBus(config.NATS_URL, `catraca-gateway ${config.CATRACA_INSTANCE ?? process.pid}`);
const gateway = await startGateway({ config, db, nc, doorId: config.CATRACA_INSTANCE, portalUrl: config.PORTAL_PUBLIC_URL });

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  log.info('shutting down: draining in-flight requests', { signal, in_flight: gateway.stats().inFlight });
  await gateway.close(config.DRAIN_TIMEOUT_MS);
  await nc.drain().catch(() => {});
  await db.end().catch(() => {});
  log.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
