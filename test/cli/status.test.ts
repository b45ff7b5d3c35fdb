import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { connect, type NatsConnection } from 'nats';
import { randomUUID } from 'node:crypto';
import { createMetrics, registerMonitoring } from '../../src/bus/monitoring.ts';
import { collectInstances, type InstanceRow } from '../../src/bus/instances.ts';
import { formatTable, runStatus } from '../../src/cli/status.ts';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

describe('catraca status', () => {
  let nc: NatsConnection;
  const run = randomUUID().slice(0, 8);
  const gw = `st-gw-${run}`;
  const wk = `st-wk-${run}`;
  const stops: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    nc = await connect({ servers: NATS_URL });
    const g = createMetrics();
    g.gauge('catraca_inflight', 'Open requests').set(3);
    g.counter('catraca_jobs_total', 'Requests answered').inc(40);
    g.counter('catraca_errors_total', 'Errors', { code: '502' }).inc(1);
    g.counter('catraca_errors_total', 'Errors', { code: '504' }).inc(2);
    const h = g.histogram('catraca_latency_seconds', 'Request time', {}, [0.001, 0.01, 0.1]);
    for (let i = 0; i < 99; i++) h.observe(0.005);
    h.observe(0.05);
    const w = createMetrics();
    w.gauge('catraca_inflight', 'Jobs streaming').set(7);
    stops.push((await registerMonitoring(nc, { name: 'catraca-gateway', version: '0.1.0', instanceId: gw, metrics: g })).stop);
    stops.push(
      (await registerMonitoring(nc, { name: 'catraca-worker', version: '0.1.0', instanceId: wk, metrics: w, extra: () => ({ pools: ['openai'] }) })).stop,
    );
  });
  afterAll(async () => {
    for (const s of stops) await s();
    await nc?.close();
  });

  const mine = (rows: InstanceRow[]) => rows.filter((r) => r.instance === gw || r.instance === wk);

  it('discovers every instance with its headline figures', async () => {
    const rows = mine(await collectInstances(nc));
    expect(rows.map((r) => [r.service, r.instance])).toEqual([
      ['catraca-gateway', gw],
      ['catraca-worker', wk],
    ]);
    const [g, w] = rows as [InstanceRow, InstanceRow];
    expect(g.inflight).toBe(3);
    expect(g.jobs_total).toBe(40);
    expect(g.errors_total).toBe(3); // 1 + 2 over both label sets
    // 99 × 5 ms in (1,10] ms, 1 × 50 ms in (10,100] ms: p50 rank 50 → 1 + 9·50/99 ms (kept to the µs), p99 rank 99 → top of (1,10] = 10 ms
    expect(g.latency_p50_ms).toBe(5.545);
    expect(g.latency_p99_ms).toBe(10);
    expect(g.pid).toBe(process.pid);
    expect(g.version).toBe('0.1.0');
    expect(w.inflight).toBe(7);
    expect(w.jobs_total).toBe(null);
    expect(w.latency_p99_ms).toBe(null);
    expect(w.extra).toEqual({ pools: ['openai'] });
  });

  it('filters by service and renders a table', async () => {
    const rows = mine(await collectInstances(nc, { service: 'catraca-worker' }));
    expect(rows.map((r) => r.instance)).toEqual([wk]);
    const text = formatTable(rows.map((r) => ({ ...r, host: 'h', pid: 42, uptime_s: 75, rss_mib: 50, event_loop_p99_ms: 1.5 })));
    expect(text.split('\n')).toEqual([
      `SERVICE  INSTANCE${' '.repeat(wk.length - 8)}  HOST  PID  UPTIME  IN-FLIGHT  JOBS  JOBS/S  ERRORS  P50 MS  P99 MS  RSS MIB  LOOP P99`,
      `worker   ${wk}  h      42  1m15s           7     -       -       -       -       -       50       1.5`,
    ]);
  });

  it('prints one JSON object with --json', async () => {
    const out: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => {
      out.push(String(s));
      return true;
    });
    try {
      expect(await runStatus({ natsUrl: NATS_URL, json: true, args: ['--service', 'gateway'] })).toBe(0);
    } finally {
      spy.mockRestore();
    }
    expect(out.length).toBe(1);
    const doc = JSON.parse(out[0]!) as { instances: InstanceRow[] };
    const g = doc.instances.find((r) => r.instance === gw)!;
    expect(g.service).toBe('catraca-gateway');
    expect(g.counters).toEqual({ catraca_jobs_total: 40, 'catraca_errors_total{code="502"}': 1, 'catraca_errors_total{code="504"}': 2 });
    expect(doc.instances.some((r) => r.service !== 'catraca-gateway')).toBe(false);
  });

  it('fails with exit code 1 when NATS is unreachable, 2 on a bad argument', async () => {
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      expect(await runStatus({ natsUrl: 'nats://127.0.0.1:1', json: false, args: [] })).toBe(1);
      expect(await runStatus({ natsUrl: NATS_URL, json: false, args: ['--bogus'] })).toBe(2);
    } finally {
      err.mockRestore();
    }
  });
});
