import type { Config } from '../../src/config.ts';
import { createAnthropicAdapter } from './anthropic/index.ts';
import { createOpenAIAdapter } from './openai/index.ts';
import { createSimAdapter } from './sim/index.ts';
import type { Adapter } from './types.ts';

export interface AdapterRegistry {
  /** The adapter serving a pool: `sim` → the built-in simulator, `anthropic` → Anthropic Messages, any other pool → OpenAI-compatible. */
  forPool(pool: string): Adapter;
}

export function createRegistry(
  config: Pick<Config, 'SIM_FIRST_TOKEN_MS' | 'SIM_TOKENS_PER_SECOND' | 'UPSTREAM_TIMEOUT_MS' | 'UPSTREAM_CONNECT_TIMEOUT_MS'>,
  env: Record<string, string | undefined> = process.env,
): AdapterRegistry {
  const sim = createSimAdapter({ firstTokenMs: config.SIM_FIRST_TOKEN_MS, tokensPerSecond: config.SIM_TOKENS_PER_SECOND });
  const http = { connectTimeoutMs: config.UPSTREAM_CONNECT_TIMEOUT_MS, timeoutMs: config.UPSTREAM_TIMEOUT_MS, env };
  const openai = createOpenAIAdapter(http);
  const anthropic = createAnthropicAdapter(http);
  return { forPool: (pool) => (pool === 'sim' ? sim : pool === 'anthropic' ? anthropic : openai) };
}
