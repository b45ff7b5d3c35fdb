import { loadConfig } from '../config.ts';
import { connectBus } from '../bus/connect.ts';
import { createPool } from '../db/pool.ts';
import { configureLogging, createLogger, logCrashes } from '../log.ts';
import { onShutdown, quietly } from '../process/shutdown.ts';
import { startPortal } from './server.ts';
import { defaultPortalHost, resolvePortalSetup } from './config.ts';
import { registerMonitoring, sanitizeInstanceId } from '../bus/monitoring.ts';
import { createMetrics, type Counter } from '../metrics/registry.ts';
import { serveMetrics } from '../metrics/http.ts';
import { VERSION } from '../version.ts';

// Portal process: web UI for tenants (sign-up, Pix top-ups, keys, usage, notifications), the Pix webhook and the notifier.
const log = createLogger('portal');
logCrashes(log);
const config = loadConfig();
configureLogging({ level: config.LOG_LEVEL, format: config.LOG_FORMAT });
// PORTAL_HOST unset: 127.0.0.1 in development (CATRACA_DEV=1 or PIX_PROVIDER=simulator), else 0.0.0.0.
const host = config.PORTAL_HOST ?? defaultPortalHost(config);
// Refuse a production-unsafe or incomplete Pix setup before connecting to anything.
try {
  resolvePortalSetup(config, { host });
} catch (err) {
  log.error('portal configuration refused', { error: (err as Error).message });
  process.stderr.write(`catraca portal: ${(err as Error).message}\n`);
  process.exit(1);
}
const db = createPool(config.DATABASE_URL);
const nc = await connectBus(config.NATS_URL, `portal-${process.pid}`);
const metrics = createMetrics();
const byStatus = new Map<number, Counter>();
const responses = (status: number) => {
  let c = byStatus.get(status);
  if (!c) byStatus.set(status, (c = metrics.counter('catraca_http_responses_total', 'Portal responses by HTTP status', { status: String(status) })));
  return c;
};
// notifier: webhook and e-mail deliveries of the notification events (src/portal/notifier/dispatcher.ts)
const portal = await startPortal({ db, nc, host, port: config.PORTAL_PORT, config, metrics, onResponse: (status) => responses(status).inc(), notifier: true });
// Presence and process figures in `catraca status` / $SRV.STATS and on /metrics (METRICS_PORT).
const instance = sanitizeInstanceId(config.CATRACA_INSTANCE ?? `portal-${process.pid}`);
const monitoring = await registerMonitoring(nc, { name: 'catraca-portal', version: VERSION, instanceId: instance, metrics });
const metricsServer = await serveMetrics(config, metrics, { instance });
log.info('portal ready', { url: portal.url, metrics_port: metricsServer?.port ?? null });

onShutdown(
  log,
  async () => {
    await portal.close();
    await quietly(monitoring.stop());
    await quietly(metricsServer?.close());
    await quietly(nc.drain());
    await quietly(db.end());
  },
  { forceAfterMs: 10_000 },
);
