import { redactNatsUrl } from '../src/bus/connect.ts';
import { loadConfig } from '../src/config.ts';
import { createLogger, logCrashes } from '../src/log.ts';
import { startWorker } from './worker.ts';
import { monitorWorker } from './monitoring.ts';
import { serveMetrics } from '../src/metrics/http.ts';

// Entry point: `tsx workers/main.ts`. WORKER_POOLS=sim,openai,anthropic … WORKER_CONCURRENCY, NATS_URL.
const log = createLogger('worker');
logCrashes(log);
const config = loadConfig();
const pools = config.WORKER_POOLS.split(',').map((p) => p.trim()).filter(Boolean);

let onJobEnd: ((ms: number) => void) | undefined;
let onFirstToken: ((ms: number) => void) | undefined;
const worker = await startWorker({ config, pools, natsUrl: config.NATS_URL, id: config.CATRACA_INSTANCE, onJobEnd: (ms) => onJobEnd?.(ms), onFirstToken: (ms) => onFirstToken?.(ms) });
const monitoring = await monitorWorker(worker.nc, worker.id, () => worker.stats());
onJobEnd = monitoring.jobEnded;
onFirstToken = monitoring.firstToken;
const metricsServer = await serveMetrics(config, monitoring.metrics, { instance: worker.id });
log.info('worker ready', { worker: worker.id, pools, nats: redactNatsUrl(config.NATS_URL), metrics_port: metricsServer?.port ?? null });

let signals = 0;
const shutdown = (sig: string) => {
  if (++signals > 1) {
    log.warn('second signal: exiting now', { sig });
    process.exit(1);
  }
  log.info('shutting down', { sig });
  monitoring.stop().catch(() => {});
  metricsServer?.close().catch(() => {});
  worker.stop().then(
    () => process.exit(0),
    (err) => {
      log.error('shutdown failed', { err });
      process.exit(1);
    },
  );
};
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
