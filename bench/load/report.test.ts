import { describe, expect, it } from 'vitest';
import { table } from '../../src/cli/table.ts';
import { checkGoals, errorRate, overheads } from './report.ts';
import type { TargetResult } from './runner.ts';

const h = (p50: number, p99: number) => ({ count: 10, min: p50, mean: p50, p50, p90: p99, p99, max: p99 });
function result(target: string, total: [number, number], ttft: [number, number], extra: Partial<TargetResult> = {}): TargetResult {
  return {
    target,
    url: 'http://127.0.0.1:1/v1',
    model: 'm',
    mode: 'open',
    rate: 500,
    concurrency: null,
    stream: true,
    client: 'http',
    duration_s: 20,
    scheduled: 1000,
    sent: 1000,
    ok: 1000,
    dropped: 0,
    late: 0,
    achieved_rps: 500,
    errors: { total: 0, by_status: {}, by_type: {} },
    total_ms: h(...total),
    ttft_ms: h(...ttft),
    gap_ms: h(10, 12),
    dispatch_lag_ms: h(0.1, 1),
    content_chunks: 10000,
    max_inflight_seen: 60,
    runner: { cpu_pct: 20, event_loop_p99_ms: 1 },
    loadavg_1m: { start: 0, end: 0 },
    ...extra,
  };
}

describe('overheads and goals', () => {
  const direct = result('direct', [111.5, 115.9], [21.1, 25]);
  const gateway = result('gateway', [112.2, 119.4], [21.9, 33], {
    sent: 990,
    dropped: 10,
    errors: { total: 5, by_status: { '503': 5 }, by_type: { http_503: 5 } },
  });

  it('compares every target with the first, for total and TTFT', () => {
    expect(overheads([direct, gateway])).toEqual([
      { baseline: 'direct', target: 'gateway', metric: 'total', p50_added_ms: 0.7, p99_added_ms: 3.5, p50_ratio: 1.006, p99_ratio: 1.03 },
      { baseline: 'direct', target: 'gateway', metric: 'ttft', p50_added_ms: 0.8, p99_added_ms: 8, p50_ratio: 1.038, p99_ratio: 1.32 },
    ]);
    expect(overheads([direct])).toEqual([]);
  });

  it('counts errors and drops against everything attempted', () => {
    expect(errorRate(gateway)).toBe(15 / 1000);
    expect(errorRate(direct)).toBe(0);
  });

  it('checks the goals', () => {
    const g = checkGoals([direct, gateway], overheads([direct, gateway]), { added_p50_ms: 1, added_p99_ms: 5, max_error_rate: 0 });
    expect(g.map((c) => [c.target, c.goal, c.value, c.pass])).toEqual([
      ['direct', 'error_rate (errors+dropped)/attempted', 0, true],
      ['gateway', 'error_rate (errors+dropped)/attempted', 0.015, false],
      ['gateway', 'total p50 added ms', 0.7, true],
      ['gateway', 'total p99 added ms', 3.5, true],
      ['gateway', 'ttft p50 added ms', 0.8, true],
      ['gateway', 'ttft p99 added ms', 8, false],
    ]);
  });

  it('aligns tables: numbers right, text left', () => {
    expect(
      table([
        ['a', 'bb'],
        ['long', 5],
        ['x', 123],
      ]),
    ).toBe('a     bb\nlong    5\nx     123');
  });
});
