import { redactNatsUrl } from '../src/bus/connect.ts';
import { loadConfig } from '../src/config.ts';
import { configureLogging, createLogger, logCrashes } from '../src/log.ts';
import { onShutdown, quietly } from '../src/process/shutdown.ts';
import { startWorker } from './worker.ts';
import { monitorWorker } from '../src/runner/monitoring.ts';
import { serveMetrics } from '../src/metrics/http.ts';

// Entry point: `tsx workers/main.ts`. WORKER_POOLS=sim,openai,anthropic … WORKER_CONCURRENCY, NATS_URL.
const log = createLogger('worker');
logCrashes(log);
const config = loadConfig();
configureLogging({ level: config.LOG_LEVEL, format: config.LOG_FORMAT });
const pools = config.WORKER_POOLS.split(',')
  .map((p) => p.trim())
  .filter(Boolean);

let onJobEnd: ((ms: number) => void) | undefined;
let onFirstToken: ((ms: number) => void) | undefined;
const worker = await startWorker({
  config,
  pools,
  natsUrl: config.NATS_URL,
  id: config.CATRACA_INSTANCE,
  onJobEnd: (ms) => onJobEnd?.(ms),
  onFirstToken: (ms) => onFirstToken?.(ms),
});
const monitoring = await monitorWorker(worker.nc, worker.id, () => worker.stats());
onJobEnd = monitoring.jobEnded;
onFirstToken = monitoring.firstToken;
const metricsServer = await serveMetrics(config, monitoring.metrics, { instance: worker.id });
log.info('worker ready', { worker: worker.id, pools, nats: redactNatsUrl(config.NATS_URL), metrics_port: metricsServer?.port ?? null });

onShutdown(
  log,
  async () => {
    await quietly(monitoring.stop());
    await quietly(metricsServer?.close());
    await worker.stop();
  },
  { forceAfterMs: config.DRAIN_TIMEOUT_MS + 10_000, describe: () => ({ in_flight: worker.stats().inFlight }) },
);
