import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, RequestStrategy, type NatsConnection, type ServiceStats } from 'nats';
import { randomUUID } from 'node:crypto';
import { createMetrics, monitorSubject, registerMonitoring, sanitizeInstanceId, type InstanceStatsData } from '../../src/bus/monitoring.ts';
import { decodeJson } from '../../src/bus/messages.ts';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

describe('registerMonitoring over NATS', () => {
  let nc1: NatsConnection;
  let nc2: NatsConnection;
  let client: NatsConnection;
  const run = randomUUID().slice(0, 8);
  const idA = `gw-a-${run}`;
  const idB = `gw-b.${run}`; // the dot is not allowed in a subject token: sanitized to _
  const stops: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    nc1 = await connect({ servers: NATS_URL });
    nc2 = await connect({ servers: NATS_URL });
    client = await connect({ servers: NATS_URL });
    const mA = createMetrics();
    mA.counter('catraca_jobs_total', 'Requests answered').inc(12);
    mA.counter('catraca_errors_total', 'Errors').inc(2);
    mA.gauge('catraca_inflight', 'Open requests').set(4);
    mA.histogram('catraca_latency_seconds', 'Request time', {}, [0.001, 0.01]).observe(0.005);
    const mB = createMetrics();
    mB.counter('catraca_jobs_total', 'Requests answered').inc(1);
    const a = await registerMonitoring(nc1, { name: 'catraca-gateway', version: '0.1.0', instanceId: idA, metrics: mA, extra: () => ({ door: 'A' }) });
    const b = await registerMonitoring(nc2, { name: 'catraca-gateway', version: '0.1.0', instanceId: idB, metrics: mB });
    stops.push(a.stop, b.stop);
  });
  afterAll(async () => {
    for (const s of stops) await s();
    await Promise.all([nc1?.close(), nc2?.close(), client?.close()]);
  });

  async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
    const out: T[] = [];
    for await (const x of it) out.push(x);
    return out;
  }
  const ours = (md?: Record<string, string>) => md?.instance === idA || md?.instance === sanitizeInstanceId(idB);
  /**
   * Discovery under load: a `Timer` strategy waits the whole window (a jittered one stops shortly
   * after the first answer, and a busy machine's second answer can come later), and the question
   * is asked again until `done` holds or 15 s pass — the answers of the last try are returned.
   */
  async function discover<T extends { metadata?: Record<string, string> }>(
    ask: (svc: ReturnType<NatsConnection['services']['client']>) => Promise<AsyncIterable<T>>,
    done: (found: T[]) => boolean,
  ): Promise<T[]> {
    const deadline = Date.now() + 15000;
    for (;;) {
      const svc = client.services.client({ strategy: RequestStrategy.Timer, maxWait: 1500 });
      const found = (await collect(await ask(svc))).filter((x) => ours(x.metadata));
      if (done(found) || Date.now() > deadline) return found;
    }
  }

  it('answers $SRV.PING.catraca-gateway for both instances', async () => {
    const pings = await discover(
      (svc) => svc.ping('catraca-gateway'),
      (found) => found.length >= 2,
    );
    expect(pings.map((p) => p.metadata!.instance).sort()).toEqual([idA, `gw-b_${run}`].sort());
    for (const p of pings) {
      expect(p.name).toBe('catraca-gateway');
      expect(p.version).toBe('0.1.0');
      expect(p.type).toBe('io.nats.micro.v1.ping_response');
    }
  });

  it('carries the metrics snapshot in $SRV.STATS endpoint data', async () => {
    const stats: ServiceStats[] = await discover(
      (svc) => svc.stats('catraca-gateway'),
      (found) => found.length >= 2,
    );
    expect(stats.length).toBe(2);
    const a = stats.find((s) => s.metadata!.instance === idA)!;
    expect(a.endpoints!.length).toBe(1);
    expect(a.endpoints![0]!.name).toBe('metrics');
    expect(a.endpoints![0]!.subject).toBe(`catraca.monitor.${idA}`);
    const d = a.endpoints![0]!.data as InstanceStatsData;
    expect(d.instance).toBe(idA);
    expect(d.pid).toBe(process.pid);
    expect(d.counters).toEqual({ catraca_jobs_total: 12, catraca_errors_total: 2 });
    expect(d.gauges).toEqual({ catraca_inflight: 4 });
    expect(d.histograms).toEqual({ catraca_latency_seconds: { count: 1, sum: 0.005, min: 0.005, max: 0.005, p50: 0.005, p90: 0.005, p99: 0.005 } });
    expect(d.extra).toEqual({ door: 'A' });
    expect(typeof d.process.rss_bytes).toBe('number');
    const b = stats.find((s) => s.metadata!.instance === `gw-b_${run}`)!;
    expect((b.endpoints![0]!.data as InstanceStatsData).counters).toEqual({ catraca_jobs_total: 1 });
    expect((b.endpoints![0]!.data as InstanceStatsData).extra).toEqual({});
  });

  it('answers a direct request on catraca.monitor.<instance> and stops cleanly', async () => {
    const msg = await client.request(monitorSubject(idA), new Uint8Array(), { timeout: 2000 });
    expect((decodeJson(msg.data) as InstanceStatsData).counters).toEqual({ catraca_jobs_total: 12, catraca_errors_total: 2 });
    const info = await discover(
      (svc) => svc.info('catraca-gateway'),
      (found) => found.length >= 2,
    );
    expect(info.length).toBe(2);
    expect(info[0]!.endpoints.map((e) => e.name)).toEqual(['metrics']);
    await stops.pop()!(); // stop B
    const after = await discover(
      (svc) => svc.ping('catraca-gateway'),
      (found) => found.length === 1,
    );
    expect(after.map((p) => p.metadata!.instance)).toEqual([idA]);
  });
});
