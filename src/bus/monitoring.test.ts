import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, RequestStrategy, type NatsConnection, type ServiceStats } from 'nats';
import { randomUUID } from 'node:crypto';
import {
  bucketQuantile,
  createMetrics,
  monitorSubject,
  registerMonitoring,
  renderPrometheus,
  sanitizeInstanceId,
  seriesKey,
  type InstanceStatsData,
} from './monitoring.ts';
import { decodeJson } from './messages.ts';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

describe('bucketQuantile', () => {
  const bounds = [1, 2, 5, 10];
  it('interpolates inside the bucket holding the rank', () => {
    // 10 in (0,1], 10 in (1,2], 0 in (2,5], 0 in (5,10], 0 in +Inf
    const counts = [10, 10, 0, 0, 0];
    expect(bucketQuantile(0.5, bounds, counts, 0, 2)).toBe(1); // rank 10 → top of first bucket
    expect(bucketQuantile(0.75, bounds, counts, 0, 2)).toBe(1.5); // rank 15 → halfway through (1,2]
    expect(bucketQuantile(0.25, bounds, counts, 0, 2)).toBe(0.5);
  });
  it('clamps to the observed min and max', () => {
    expect(bucketQuantile(0.99, bounds, [0, 0, 4, 0, 0], 3, 3.5)).toBe(3.5); // 2 + 3·0.99 = 4.97 → max 3.5
    expect(bucketQuantile(0.01, bounds, [0, 0, 4, 0, 0], 3, 3.5)).toBe(3); // 2.03 → min 3
  });
  it('returns the max for a rank in the +Inf bucket and 0 when empty', () => {
    expect(bucketQuantile(0.99, bounds, [1, 0, 0, 0, 1], 0.5, 42)).toBe(42);
    expect(bucketQuantile(0.5, bounds, [0, 0, 0, 0, 0], 0, 0)).toBe(0);
  });
});

describe('createMetrics', () => {
  it('counts, rates over the last 10 s, gauges and histogram summaries', () => {
    let t = 1_000_000;
    const m = createMetrics({ now: () => t });
    const jobs = m.counter('catraca_jobs_total', 'Jobs finished');
    const e502 = m.counter('catraca_errors_total', 'Errors', { code: '502' });
    const inflight = m.gauge('catraca_inflight', 'In flight');
    let holds = 7;
    m.gauge('catraca_open_holds', 'Open holds', {}, () => holds);
    const lat = m.histogram('catraca_latency_ms', 'Latency', {}, [1, 2, 5, 10]);
    t += 500;
    jobs.inc();
    jobs.inc(4);
    e502.inc();
    inflight.inc(3);
    inflight.dec();
    for (const v of [0.5, 1.5, 1.5, 4, 20]) lat.observe(v);
    holds = 9;
    t = 1_002_000; // registry age 2 s
    expect(m.snapshot()).toEqual({
      uptime_s: 2,
      counters: { catraca_jobs_total: 5, 'catraca_errors_total{code="502"}': 1 },
      rates: { catraca_jobs_total: 2.5, 'catraca_errors_total{code="502"}': 0.5 },
      gauges: { catraca_inflight: 2, catraca_open_holds: 9 },
      histograms: {
        // counts per bucket: (0,1]:1 (1,2]:2 (2,5]:1 (5,10]:0 +Inf:1
        // p50 rank 2.5 → (1,2]: 1 + 1·1.5/2 = 1.75; p90 rank 4.5 and p99 rank 4.95 → +Inf → max 20
        catraca_latency_ms: { count: 5, sum: 27.5, min: 0.5, max: 20, p50: 1.75, p90: 20, p99: 20 },
      },
    });
    // 11 s later the increments made at t=1_000_500 have left the 10-slot window
    t = 1_012_000;
    jobs.inc(10);
    expect(m.snapshot().rates).toEqual({ catraca_jobs_total: 1, 'catraca_errors_total{code="502"}': 0 });
  });

  it('returns the same series for the same name and labels, and rejects type clashes', () => {
    const m = createMetrics();
    const a = m.counter('x_total', 'x', { b: '1', a: '2' });
    expect(m.counter('x_total', 'x', { a: '2', b: '1' })).toBe(a);
    expect(() => m.gauge('x_total', 'x')).toThrow('metric x_total already registered as a counter');
    expect(() => m.counter('bad-name', 'x')).toThrow('invalid metric name bad-name');
    expect(() => m.histogram('h_ms', 'h', { le: '1' })).toThrow('invalid label name le');
    expect(seriesKey('x_total', { b: '1', a: 'q"\\' })).toBe('x_total{a="q\\"\\\\",b="1"}');
  });
});

describe('renderPrometheus', () => {
  it('renders HELP/TYPE, labels and cumulative histogram buckets', () => {
    const m = createMetrics();
    m.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: '200' }).inc(3);
    m.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: '502' }).inc();
    m.gauge('catraca_inflight', 'Open requests\nnow').set(2);
    const h = m.histogram('catraca_latency_ms', 'Total time, ms', {}, [1, 2.5]);
    h.observe(0.5);
    h.observe(2);
    h.observe(2.5);
    h.observe(7);
    expect(renderPrometheus(m, { instance: 'gw-1' })).toBe(
      [
        '# HELP catraca_http_responses_total Responses by HTTP status',
        '# TYPE catraca_http_responses_total counter',
        'catraca_http_responses_total{instance="gw-1",status="200"} 3',
        'catraca_http_responses_total{instance="gw-1",status="502"} 1',
        '# HELP catraca_inflight Open requests\\nnow',
        '# TYPE catraca_inflight gauge',
        'catraca_inflight{instance="gw-1"} 2',
        '# HELP catraca_latency_ms Total time, ms',
        '# TYPE catraca_latency_ms histogram',
        'catraca_latency_ms_bucket{instance="gw-1",le="1"} 1',
        'catraca_latency_ms_bucket{instance="gw-1",le="2.5"} 3',
        'catraca_latency_ms_bucket{instance="gw-1",le="+Inf"} 4',
        'catraca_latency_ms_sum{instance="gw-1"} 12',
        'catraca_latency_ms_count{instance="gw-1"} 4',
        '',
      ].join('\n'),
    );
    expect(renderPrometheus(createMetrics())).toBe('');
  });
});

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
    mA.histogram('catraca_latency_ms', 'Request time', {}, [1, 10]).observe(5);
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

  it('answers $SRV.PING.catraca-gateway for both instances', async () => {
    const svc = client.services.client({ strategy: RequestStrategy.Timer, maxWait: 2000 });
    const pings = (await collect(await svc.ping('catraca-gateway'))).filter((p) => ours(p.metadata));
    expect(pings.map((p) => p.metadata!.instance).sort()).toEqual([idA, `gw-b_${run}`].sort());
    for (const p of pings) {
      expect(p.name).toBe('catraca-gateway');
      expect(p.version).toBe('0.1.0');
      expect(p.type).toBe('io.nats.micro.v1.ping_response');
    }
  });

  it('carries the metrics snapshot in $SRV.STATS endpoint data', async () => {
    const svc = client.services.client({ strategy: RequestStrategy.Timer, maxWait: 2000 });
    const stats = (await collect(await svc.stats('catraca-gateway'))).filter((s: ServiceStats) => ours(s.metadata));
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
    expect(d.histograms).toEqual({ catraca_latency_ms: { count: 1, sum: 5, min: 5, max: 5, p50: 5, p90: 5, p99: 5 } });
    expect(d.extra).toEqual({ door: 'A' });
    expect(typeof d.process.rss_bytes).toBe('number');
    const b = stats.find((s) => s.metadata!.instance === `gw-b_${run}`)!;
    expect((b.endpoints![0]!.data as InstanceStatsData).counters).toEqual({ catraca_jobs_total: 1 });
    expect((b.endpoints![0]!.data as InstanceStatsData).extra).toEqual({});
  });

  it('answers a direct request on catraca.monitor.<instance> and stops cleanly', async () => {
    const msg = await client.request(monitorSubject(idA), new Uint8Array(), { timeout: 2000 });
    expect((decodeJson(msg.data) as InstanceStatsData).counters).toEqual({ catraca_jobs_total: 12, catraca_errors_total: 2 });
    const info = (await collect(await client.services.client().info('catraca-gateway'))).filter((i) => ours(i.metadata));
    expect(info.length).toBe(2);
    expect(info[0]!.endpoints.map((e) => e.name)).toEqual(['metrics']);
    await stops.pop()!(); // stop B
    const after = (await collect(await client.services.client({ strategy: RequestStrategy.JitterTimer, maxWait: 1000 }).ping('catraca-gateway'))).filter((p) => ours(p.metadata));
    expect(after.map((p) => p.metadata!.instance)).toEqual([idA]);
  });
});
