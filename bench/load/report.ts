import os from 'node:os';
import { table } from '../../src/cli/table.ts';
import type { Goals } from '../scenarios.ts';
import type { TargetResult } from './runner.ts';

// Comparison of targets (gateway vs the direct mock) and plain-text tables.

export interface Overhead {
  baseline: string;
  target: string;
  metric: 'total' | 'ttft';
  p50_added_ms: number;
  p99_added_ms: number;
  p50_ratio: number;
  p99_ratio: number;
}

export interface GoalCheck {
  target: string;
  goal: string;
  limit: number;
  value: number;
  pass: boolean;
}

const r3 = (v: number) => Math.round(v * 1000) / 1000;
const ratio = (a: number, b: number) => (b > 0 ? r3(a / b) : 0);

export function overheads(results: TargetResult[]): Overhead[] {
  if (results.length < 2) return [];
  const base = results[0]!;
  const out: Overhead[] = [];
  for (const t of results.slice(1)) {
    const metrics: Array<'total' | 'ttft'> = t.stream ? ['total', 'ttft'] : ['total'];
    for (const m of metrics) {
      const a = m === 'total' ? t.total_ms : t.ttft_ms;
      const b = m === 'total' ? base.total_ms : base.ttft_ms;
      out.push({
        baseline: base.target,
        target: t.target,
        metric: m,
        p50_added_ms: r3(a.p50 - b.p50),
        p99_added_ms: r3(a.p99 - b.p99),
        p50_ratio: ratio(a.p50, b.p50),
        p99_ratio: ratio(a.p99, b.p99),
      });
    }
  }
  return out;
}

export function errorRate(r: TargetResult): number {
  const attempted = r.sent + r.dropped;
  return attempted ? (r.errors.total + r.dropped) / attempted : 0;
}

/** Added-latency goals apply to every non-baseline target; the error-rate goal to every target. */
export function checkGoals(results: TargetResult[], ov: Overhead[], goals: Goals): GoalCheck[] {
  const out: GoalCheck[] = [];
  for (const r of results)
    out.push({
      target: r.target,
      goal: 'error_rate (errors+dropped)/attempted',
      limit: goals.max_error_rate,
      value: r3(errorRate(r)),
      pass: errorRate(r) <= goals.max_error_rate,
    });
  for (const o of ov) {
    if (goals.added_p50_ms !== undefined)
      out.push({
        target: o.target,
        goal: `${o.metric} p50 added ms`,
        limit: goals.added_p50_ms,
        value: o.p50_added_ms,
        pass: o.p50_added_ms <= goals.added_p50_ms,
      });
    if (goals.added_p99_ms !== undefined)
      out.push({
        target: o.target,
        goal: `${o.metric} p99 added ms`,
        limit: goals.added_p99_ms,
        value: o.p99_added_ms,
        pass: o.p99_added_ms <= goals.added_p99_ms,
      });
  }
  return out;
}

export function formatResults(results: TargetResult[]): string {
  const rows: (string | number)[][] = [
    ['target', 'sent', 'ok', 'err', 'drop', 'late', 'rps', 'p50', 'p90', 'p99', 'max', 'ttft50', 'ttft99', 'gap50', 'gap99', 'cpu%', 'load1m'],
  ];
  for (const r of results) {
    rows.push([
      r.target,
      r.sent,
      r.ok,
      r.errors.total,
      r.dropped,
      r.late,
      r.achieved_rps,
      r.total_ms.p50,
      r.total_ms.p90,
      r.total_ms.p99,
      r.total_ms.max,
      r.ttft_ms.p50,
      r.ttft_ms.p99,
      r.gap_ms.p50,
      r.gap_ms.p99,
      r.runner.cpu_pct,
      `${r.loadavg_1m.start}→${r.loadavg_1m.end}`,
    ]);
  }
  let s =
    table(rows) +
    `\n(times in ms, from the intended send time; cpu% = the load runner's own CPU, 100 = one core; load1m = machine load average at start→end, ${os.cpus().length} cores)`;
  for (const r of results) {
    if (r.errors.total) s += `\nerrors ${r.target}: ${JSON.stringify(r.errors.by_type)}`;
  }
  return s;
}

export function formatOverheads(ov: Overhead[]): string {
  if (!ov.length) return '';
  const rows: (string | number)[][] = [['target', 'vs', 'metric', 'p50 +ms', 'p99 +ms', 'p50 ×', 'p99 ×']];
  for (const o of ov) rows.push([o.target, o.baseline, o.metric, o.p50_added_ms, o.p99_added_ms, o.p50_ratio, o.p99_ratio]);
  return table(rows);
}

export function formatGoals(g: GoalCheck[]): string {
  if (!g.length) return '';
  const rows: (string | number)[][] = [['target', 'goal', 'limit', 'value', 'result']];
  for (const c of g) rows.push([c.target, c.goal, c.limit, c.value, c.pass ? 'PASS' : 'FAIL']);
  return table(rows);
}
