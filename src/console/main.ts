import { connectBus } from '../bus/connect.ts';
import { loadConfig } from '../config.ts';
import { createPool } from '../db/pool.ts';
import { configureLogging, createLogger, logCrashes } from '../log.ts';
import { serveMetrics } from '../metrics/http.ts';
import { type Counter, createMetrics } from '../metrics/registry.ts';
import { isLoopbackHost } from '../web/proxy.ts';
import { onShutdown, quietly } from '../process/shutdown.ts';
import { ConsoleConfigError } from './config.ts';
import { startConsole } from './server.ts';
import { FxService } from '../fx/service.ts';

// The operator's console: a process of its own on CONSOLE_HOST:CONSOLE_PORT (127.0.0.1:8082 by
// default), connecting to PostgreSQL as catraca_console and to NATS to tell front doors and workers
// what changed. Operators reach it through a VPN or an SSH tunnel (docs/console.md).
const log = createLogger('console');
logCrashes(log);
const config = loadConfig();
configureLogging({ level: config.LOG_LEVEL, format: config.LOG_FORMAT });
if (!isLoopbackHost(config.CONSOLE_HOST))
  log.warn('the console listens beyond this machine: make sure only operators can reach that address (a VPN), and prefer https (CONSOLE_PUBLIC_URL)', {
    host: config.CONSOLE_HOST,
  });
const db = createPool(config.DATABASE_URL, 5, { connectTimeoutMs: config.DB_CONNECT_TIMEOUT_MS, statementTimeoutMs: 60_000 });
const nc = await connectBus(config.NATS_URL, `console-${process.pid}`);
const metrics = createMetrics();
const byStatus = new Map<number, Counter>();
const responses = (status: number) => {
  let c = byStatus.get(status);
  if (!c) byStatus.set(status, (c = metrics.counter('catraca_http_responses_total', 'Console responses by HTTP status', { status: String(status) })));
  return c;
};
let server: Awaited<ReturnType<typeof startConsole>>;
try {
  server = await startConsole({
    db,
    nc,
    host: config.CONSOLE_HOST,
    port: config.CONSOLE_PORT,
    publicUrl: config.CONSOLE_PUBLIC_URL,
    trustedProxies: (config.CONSOLE_TRUSTED_PROXIES ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    reservedPorts: [
      { name: 'front door', port: config.GATEWAY_PORT },
      { name: 'portal', port: config.PORTAL_PORT },
    ],
    onResponse: (status) => responses(status).inc(),
  });
} catch (err) {
  if (err instanceof ConsoleConfigError) {
    log.error('console configuration refused', { error: err.message });
    process.stderr.write(`catraca console: ${err.message}\n`);
    process.exit(1);
  }
  throw err;
}
// the dollar's rate for USD-priced models: the day's PTAX after PTAX_HOUR, recomputed prices announced (src/fx/)
const fx = new FxService(db, { ptaxUrl: config.PTAX_URL, hour: config.PTAX_HOUR, nc, metrics });
fx.start();
const metricsServer = await serveMetrics(config, metrics, { instance: config.CATRACA_INSTANCE ?? `console-${process.pid}` });
// a console nobody can sign in to says how to fix that
const { rows } = await db.query('select count(*)::int as n from operators where disabled_at is null');
if (rows[0].n === 0) log.warn('no operator can sign in yet: create the first with `catraca operator create --email …`');
log.info('console ready', { url: server.url, port: Number(new URL(server.url).port), metrics_port: metricsServer?.port ?? null });

onShutdown(
  log,
  async () => {
    await server.close();
    await quietly(fx.stop());
    await quietly(metricsServer?.close());
    await quietly(nc.drain());
    await quietly(db.end());
  },
  { forceAfterMs: 10_000 },
);
