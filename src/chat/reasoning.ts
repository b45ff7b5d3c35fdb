// OpenRouter's `reasoning` request field ({effort | max_tokens, exclude, enabled}) in each vendor's
// terms: OpenAI's reasoning_effort, Anthropic's thinking budget. Applied only to models the catalog
// marks as reasoning (`model set --reasoning true`).

export const REASONING_EFFORTS = ['xhigh', 'high', 'medium', 'low', 'minimal', 'none'] as const;

export interface Reasoning {
  effort?: (typeof REASONING_EFFORTS)[number];
  max_tokens?: number;
  exclude?: boolean;
  enabled?: boolean;
}

const EFFORT_SHARE: Record<Exclude<(typeof REASONING_EFFORTS)[number], 'none'>, number> = { xhigh: 0.95, high: 0.8, medium: 0.5, low: 0.2, minimal: 0.1 };

/** OpenAI's reasoning_effort for OpenRouter's `reasoning` (a token budget becomes the effort of its share of the output cap). */
export function reasoningEffort(r: Reasoning, outputCap: number): string | undefined {
  if (r.enabled === false || r.effort === 'none') return undefined;
  if (r.effort) return r.effort === 'xhigh' ? 'high' : r.effort;
  if (r.max_tokens !== undefined) {
    const share = r.max_tokens / Math.max(1, outputCap);
    return share >= 0.8 ? 'high' : share >= 0.5 ? 'medium' : 'low';
  }
  return 'medium';
}

/** Anthropic's thinking budget for OpenRouter's `reasoning`: at least 1 024 tokens and below max_tokens, or none. */
export function thinkingBudget(r: Reasoning, maxTokens: number): number | undefined {
  if (r.enabled === false || r.effort === 'none') return undefined;
  const budget = r.max_tokens ?? Math.floor(maxTokens * EFFORT_SHARE[r.effort ?? 'medium']);
  const capped = Math.min(budget, maxTokens - 1);
  return capped >= 1024 ? capped : undefined;
}
