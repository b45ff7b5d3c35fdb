// The image's HEALTHCHECK: which process, HTTP /healthz, and NATS presence for worker/metering.
import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createMetrics, registerMonitoring } from '../../src/bus/monitoring.ts';
import { checkHttp, checkNats, healthcheck, processOf } from '../../src/stack/healthcheck.ts';

test('recognises the process from the container command line', () => {
  expect(processOf('node dist/src/gateway/main.js ')).toBe('gateway');
  expect(processOf('node dist/workers/main.js ')).toBe('worker');
  expect(processOf('node dist/src/metering/main.js ')).toBe('metering');
  expect(processOf('node dist/src/portal/main.js ')).toBe('portal');
  expect(processOf('node dist/src/console/main.js ')).toBe('console');
  expect(processOf('node dist/src/stack/migrate-main.js ')).toBeNull();
  expect(processOf('')).toBeNull();
});

describe('HTTP', () => {
  let server: Server;
  let status = 200;
  let port = 0;
  beforeAll(async () => {
    server = createServer((_req, res) => res.writeHead(status).end(status === 200 ? '{"status":"ok"}' : '{"status":"draining"}'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  test('200 is healthy; 503 (draining) and nothing listening are not', async () => {
    expect(await healthcheck('gateway', { GATEWAY_PORT: String(port) })).toEqual({ ok: true, detail: 'HTTP 200 {"status":"ok"}' });
    status = 503;
    expect((await healthcheck('portal', { PORTAL_PORT: String(port) })).ok).toBe(false);
    expect((await healthcheck('console', { CONSOLE_PORT: String(port) })).ok).toBe(false);
    expect((await checkHttp(1)).ok).toBe(false);
    expect(await healthcheck(null)).toEqual({ ok: true, detail: 'nothing to check for this process' });
  });
});

describe('NATS', () => {
  let nc: NatsConnection;
  let stop: () => Promise<void>;
  beforeAll(async () => {
    nc = await connect({ servers: process.env.NATS_URL! });
    stop = (await registerMonitoring(nc, { name: 'catraca-worker', version: '0.0.0', instanceId: `hc-${process.pid}`, metrics: createMetrics() })).stop;
  });
  afterAll(async () => {
    await stop();
    await nc.close();
  });

  test("a worker registered from this host is healthy; another host's, or none, is not", async () => {
    expect(await healthcheck('worker', { NATS_URL: process.env.NATS_URL })).toMatchObject({ ok: true });
    expect(await checkNats(process.env.NATS_URL!, 'catraca-worker', 'another-container', 500)).toMatchObject({
      ok: false,
      detail: expect.stringContaining(`only on ${hostname()}`),
    });
    expect((await checkNats(process.env.NATS_URL!, 'catraca-metering', hostname(), 300)).ok).toBe(false);
    expect(await healthcheck('metering', {})).toEqual({ ok: false, detail: 'NATS_URL is not set' });
    expect((await checkNats('nats://127.0.0.1:1', 'catraca-worker')).detail).toMatch(/^NATS unreachable/);
  });
});
