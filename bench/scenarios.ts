import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

// Benchmark scenarios by name. The data lives in scenarios.json so the k6 scripts
// (bench/k6/scenarios.js, `open('../scenarios.json')`) read exactly the same names, rates,
// durations and thresholds as the Node runner.

const MockSchema = z.object({
  firstTokenMs: z.number().int().nonnegative(),
  tokensPerSecond: z.number().int().nonnegative(),
  outputTokens: z.number().int().positive(),
});

const GoalsSchema = z.object({
  added_p50_ms: z.number().optional(),
  added_p99_ms: z.number().optional(),
  max_error_rate: z.number().min(0).max(1),
});

const ScenarioInput = z.object({
  mode: z.enum(['open', 'closed']),
  rate: z.number().positive().optional(),
  concurrency: z.number().int().positive().optional(),
  stream: z.boolean(),
  warmup_s: z.number().nonnegative().optional(),
  duration_s: z.number().positive().optional(),
  max_tokens: z.number().int().positive().optional(),
  mock: MockSchema.optional(),
  goals: GoalsSchema,
  k6: z.object({ ttft_p99_ms: z.number().optional(), total_p99_ms: z.number().optional(), max_error_rate: z.number() }),
});

const FileSchema = z.object({
  defaults: z.object({
    warmup_s: z.number().nonnegative(),
    duration_s: z.number().positive(),
    model: z.string(),
    prompt: z.string(),
    max_tokens: z.number().int().positive(),
    timeout_ms: z.number().int().positive(),
    max_inflight: z.number().int().positive(),
    late_ms: z.number().nonnegative(),
    mock: MockSchema,
  }),
  scenarios: z.record(z.string(), ScenarioInput),
});

export type MockParams = z.infer<typeof MockSchema>;
export type Goals = z.infer<typeof GoalsSchema>;

export interface Scenario {
  name: string;
  mode: 'open' | 'closed';
  rate?: number;
  concurrency?: number;
  stream: boolean;
  warmupS: number;
  durationS: number;
  model: string;
  prompt: string;
  maxTokens: number;
  timeoutMs: number;
  maxInflight: number;
  lateMs: number;
  mock: MockParams;
  goals: Goals;
  k6: { ttft_p99_ms?: number; total_p99_ms?: number; max_error_rate: number };
}

export const SCENARIOS_FILE = join(dirname(fileURLToPath(import.meta.url)), 'scenarios.json');

export function loadScenarios(file = SCENARIOS_FILE): Record<string, Scenario> {
  const raw = FileSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  const d = raw.defaults;
  const out: Record<string, Scenario> = {};
  for (const [name, s] of Object.entries(raw.scenarios)) {
    if (s.mode === 'open' && !s.rate) throw new Error(`scenario ${name}: open loop needs a rate`);
    if (s.mode === 'closed' && !s.concurrency) throw new Error(`scenario ${name}: closed loop needs a concurrency`);
    out[name] = {
      name,
      mode: s.mode,
      ...(s.rate !== undefined ? { rate: s.rate } : {}),
      ...(s.concurrency !== undefined ? { concurrency: s.concurrency } : {}),
      stream: s.stream,
      warmupS: s.warmup_s ?? d.warmup_s,
      durationS: s.duration_s ?? d.duration_s,
      model: d.model,
      prompt: d.prompt,
      maxTokens: s.max_tokens ?? d.max_tokens,
      timeoutMs: d.timeout_ms,
      maxInflight: d.max_inflight,
      lateMs: d.late_ms,
      mock: s.mock ?? d.mock,
      goals: s.goals,
      k6: s.k6,
    };
  }
  return out;
}

export const scenarios: Record<string, Scenario> = loadScenarios();
