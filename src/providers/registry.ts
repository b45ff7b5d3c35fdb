import type { Config } from '../config.ts';
import type { Protocol } from '../db/models.ts';
import { createAnthropicAdapter } from './anthropic/index.ts';
import { createAzureAdapter } from './azure/index.ts';
import { createBedrockAdapter } from './bedrock/index.ts';
import { createGeminiAdapter } from './gemini/index.ts';
import { createOpenAIAdapter } from './openai/index.ts';
import { createSimAdapter } from './sim/index.ts';
import type { Adapter } from './types.ts';

export interface AdapterRegistry {
  /** The adapter speaking a catalog entry's protocol. */
  forProtocol(protocol: Protocol): Adapter;
  all(): Adapter[];
}

export function createRegistry(
  config: Pick<Config, 'SIM_FIRST_TOKEN_MS' | 'SIM_TOKENS_PER_SECOND' | 'UPSTREAM_TIMEOUT_MS' | 'UPSTREAM_CONNECT_TIMEOUT_MS' | 'WORKER_UPSTREAM_KEYS'>,
  /** The upstream keys this worker may use: only these variables are ever read (WORKER_UPSTREAM_KEYS). */
  env: Record<string, string | undefined> = upstreamKeyEnv(config.WORKER_UPSTREAM_KEYS),
): AdapterRegistry {
  const sim = createSimAdapter({ firstTokenMs: config.SIM_FIRST_TOKEN_MS, tokensPerSecond: config.SIM_TOKENS_PER_SECOND });
  const http = { connectTimeoutMs: config.UPSTREAM_CONNECT_TIMEOUT_MS, timeoutMs: config.UPSTREAM_TIMEOUT_MS, env };
  const openai = createOpenAIAdapter(http);
  const anthropic = createAnthropicAdapter(http);
  const azure = createAzureAdapter(http);
  const bedrock = createBedrockAdapter(http);
  const gemini = createGeminiAdapter(http);
  const byProtocol: Record<Protocol, Adapter> = { sim, openai, anthropic, azure, bedrock, gemini };
  return { forProtocol: (p) => byProtocol[p], all: () => Object.values(byProtocol) };
}

/** The named variables, read once from the process environment; no other variable is ever consulted. */
export function upstreamKeyEnv(names: string, source: Record<string, string | undefined> = process.env): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const name of names
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean))
    env[name] = source[name];
  return env;
}
