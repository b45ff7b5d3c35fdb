import { describe, expect, it } from 'vitest';
import { bucketQuantile, createMetrics, eventLoopDelay, processMetrics, renderPrometheus, seriesKey } from './registry.ts';

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
    const lat = m.histogram('catraca_latency_seconds', 'Latency', {}, [1, 2, 5, 10]);
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
        catraca_latency_seconds: { count: 5, sum: 27.5, min: 0.5, max: 20, p50: 1.75, p90: 20, p99: 20 },
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
    expect(() => m.histogram('h_seconds', 'h', { le: '1' })).toThrow('invalid label name le');
    expect(seriesKey('x_total', { b: '1', a: 'q"\\' })).toBe('x_total{a="q\\"\\\\",b="1"}');
  });
});

describe('renderPrometheus', () => {
  it('renders HELP/TYPE, labels and cumulative histogram buckets', () => {
    const m = createMetrics();
    m.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: '200' }).inc(3);
    m.counter('catraca_http_responses_total', 'Responses by HTTP status', { status: '502' }).inc();
    m.gauge('catraca_inflight', 'Open requests\nnow').set(2);
    const h = m.histogram('catraca_latency_seconds', 'Total time, seconds', {}, [0.001, 0.0025]);
    h.observe(0.0005);
    h.observe(0.002);
    h.observe(0.0025);
    h.observe(0.007);
    expect(renderPrometheus(m, { instance: 'gw-1' })).toBe(
      [
        '# HELP catraca_http_responses_total Responses by HTTP status',
        '# TYPE catraca_http_responses_total counter',
        'catraca_http_responses_total{instance="gw-1",status="200"} 3',
        'catraca_http_responses_total{instance="gw-1",status="502"} 1',
        '# HELP catraca_inflight Open requests\\nnow',
        '# TYPE catraca_inflight gauge',
        'catraca_inflight{instance="gw-1"} 2',
        '# HELP catraca_latency_seconds Total time, seconds',
        '# TYPE catraca_latency_seconds histogram',
        'catraca_latency_seconds_bucket{instance="gw-1",le="0.001"} 1',
        'catraca_latency_seconds_bucket{instance="gw-1",le="0.0025"} 3',
        'catraca_latency_seconds_bucket{instance="gw-1",le="+Inf"} 4',
        'catraca_latency_seconds_sum{instance="gw-1"} 0.012',
        'catraca_latency_seconds_count{instance="gw-1"} 4',
        '',
      ].join('\n'),
    );
    expect(renderPrometheus(createMetrics())).toBe('');
  });
});

describe('counters read from their source', () => {
  it('report the source value, render as counters and refuse inc()', () => {
    const m = createMetrics();
    let leased = 5;
    const c = m.counter('catraca_admissions_total', 'Admissions', { via: 'lease' }, () => leased);
    m.counter('catraca_admissions_total', 'Admissions', { via: 'hold' }, () => 2);
    leased = 8;
    expect(c.value).toBe(8);
    expect(() => c.inc()).toThrow('counter catraca_admissions_total is read from its source');
    expect(m.snapshot().counters).toEqual({ 'catraca_admissions_total{via="lease"}': 8, 'catraca_admissions_total{via="hold"}': 2 });
    expect(renderPrometheus(m)).toBe(
      [
        '# HELP catraca_admissions_total Admissions',
        '# TYPE catraca_admissions_total counter',
        'catraca_admissions_total{via="lease"} 8',
        'catraca_admissions_total{via="hold"} 2',
        '',
      ].join('\n'),
    );
  });
});

describe('processMetrics', () => {
  it('the standard process and runtime figures, from node, rendered after the own registry', async () => {
    const own = createMetrics();
    own.counter('catraca_jobs_total', 'Jobs').inc(3);
    const proc = processMetrics('9.9.9');
    expect(processMetrics()).toBe(proc); // one per process
    const text = renderPrometheus([own, proc], { instance: 'x' });
    const lines = text.split('\n');
    expect(lines.slice(0, 3)).toEqual(['# HELP catraca_jobs_total Jobs', '# TYPE catraca_jobs_total counter', 'catraca_jobs_total{instance="x"} 3']);
    const value = (name: string) => {
      const line = lines.find((l) => l.startsWith(`${name}{`));
      expect(line, name).toBeDefined();
      return Number(line!.split(' ')[1]);
    };
    for (const [name, type] of [
      ['process_cpu_seconds_total', 'counter'],
      ['process_cpu_user_seconds_total', 'counter'],
      ['process_cpu_system_seconds_total', 'counter'],
      ['process_resident_memory_bytes', 'gauge'],
      ['process_start_time_seconds', 'gauge'],
      ['process_open_fds', 'gauge'],
      ['nodejs_heap_size_used_bytes', 'gauge'],
      ['nodejs_heap_size_total_bytes', 'gauge'],
      ['nodejs_eventloop_lag_seconds', 'gauge'],
      ['nodejs_eventloop_lag_p99_seconds', 'gauge'],
    ]) {
      expect(lines).toContain(`# TYPE ${name} ${type}`);
    }
    const cpu = process.cpuUsage();
    expect(value('process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(value('process_cpu_seconds_total')).toBeLessThanOrEqual((cpu.user + cpu.system) / 1e6 + 0.5);
    expect(value('process_start_time_seconds')).toBe(Math.round((Date.now() - process.uptime() * 1000) / 1000));
    expect(value('process_resident_memory_bytes')).toBeGreaterThan(10 * 2 ** 20);
    expect(value('nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    expect(lines).toContain(`nodejs_version_info{instance="x",version="${process.versions.node}"} 1`);
    expect(lines).toContain('catraca_build_info{instance="x",version="9.9.9"} 1');
    // a blocked event loop shows in the lag figures
    await new Promise((r) => setTimeout(r, 50));
    const until = Date.now() + 120;
    while (Date.now() < until);
    await new Promise((r) => setTimeout(r, 30));
    expect(eventLoopDelay().max).toBeGreaterThanOrEqual(0.1);
    const again = renderPrometheus(proc)
      .split('\n')
      .find((l) => l.startsWith('nodejs_eventloop_lag_max_seconds '))!;
    expect(Number(again.split(' ')[1])).toBeGreaterThanOrEqual(0.1);
  });
});
