import { loadConfig } from '../config.ts';
import { connectBus } from '../bus/connect.ts';
import { createPool } from '../db/pool.ts';
import { createLogger } from '../log.ts';
import { startPortal } from './server.ts';
import { createMetrics, registerMonitoring } from '../bus/monitoring.ts';

// Portal process: web UI for tenants (sign-up, Pix top-ups, keys, usage) and the Pix webhook.
const log = createLogger('portal');
const config = loadConfig();
const db = createPool(config.DATABASE_URL);
const nc = await connectBus(config.NATS_URL, `portal-${process.pid}`);
const portal = await startPortal({ db, nc, host: config.PORTAL_HOST, port: config.PORTAL_PORT });
log.info('portal ready', { url: portal.url });
// Presence and process figures in `catraca status` / $SRV.STATS (the portal is not on the hot path).
const metrics = createMetrics();
const monitoring = await registerMonitoring(nc, { name: 'catraca-portal', version: '0.1.0', instanceId: config.CATRACA_INSTANCE ?? `portal-${process.pid}`, metrics });

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  log.info('portal stopping', { signal });
  const force = setTimeout(() => process.exit(1), 10000);
  force.unref();
  try {
    await portal.close();
    await monitoring.stop().catch(() => {});
    await nc.drain();
    await db.end();
  } finally {
    process.exit(0);
  }
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
