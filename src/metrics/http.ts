import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { processMetrics, renderPrometheus, type Labels, type Metrics } from './registry.ts';
import { VERSION } from '../version.ts';

/**
 * Prometheus text on GET /metrics, on an internal address of its own (METRICS_HOST:METRICS_PORT):
 * traffic figures are for the operator's scraper, never for the public port.
 */
export async function startMetricsServer(host: string, port: number, render: () => string): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && (req.url === '/metrics' || req.url?.startsWith('/metrics?'))) {
      const body = render();
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * What every process does with METRICS_HOST / METRICS_PORT: with a port, serves its registry and
 * the process/runtime figures (processMetrics) labelled with `labels`; without one, nothing.
 */
export async function serveMetrics(
  config: { METRICS_HOST: string; METRICS_PORT?: number },
  metrics: Metrics,
  labels: Labels = {},
): Promise<{ port: number; close(): Promise<void> } | undefined> {
  if (config.METRICS_PORT === undefined) return undefined;
  const registries = [metrics, processMetrics(VERSION)];
  return startMetricsServer(config.METRICS_HOST, config.METRICS_PORT, () => renderPrometheus(registries, labels));
}
