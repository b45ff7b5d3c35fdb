import type { Tiktoken } from 'js-tiktoken/lite';
import { contentText } from './sim/tokens.ts';
import type { TokenUsage } from './types.ts';

// Token estimate for upstreams that report no usage (or streams cut before the usage chunk):
// OpenAI's o200k_base tokenizer with OpenAI's chat framing — per message 3 tokens + role +
// content (+1 with a name), plus 3 priming the reply. The ranks (~2 MB) load on first use only.

let encoder: Promise<Tiktoken> | undefined;

function getEncoder(): Promise<Tiktoken> {
  encoder ??= (async () => {
    const [{ Tiktoken }, ranks] = await Promise.all([import('js-tiktoken/lite'), import('js-tiktoken/ranks/o200k_base')]);
    return new Tiktoken(ranks.default);
  })();
  return encoder;
}

/** Loading the ranks blocks the event loop for ~2 s: do it at startup, not inside a stream. */
export async function warmupEstimator(): Promise<void> {
  await getEncoder();
}

export async function estimateTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  return (await getEncoder()).encode(text).length;
}

export async function estimatePromptTokens(messages: unknown): Promise<number> {
  const enc = await getEncoder();
  let n = 3;
  if (Array.isArray(messages)) {
    for (const raw of messages) {
      const m = (raw ?? {}) as { role?: unknown; content?: unknown; name?: unknown };
      n += 3;
      if (typeof m.role === 'string') n += enc.encode(m.role).length;
      const text = contentText(m.content);
      if (text) n += enc.encode(text).length;
      if (typeof m.name === 'string') n += 1 + enc.encode(m.name).length;
    }
  }
  return n;
}

export async function estimateUsage(messages: unknown, output: string): Promise<TokenUsage> {
  return { prompt_tokens: await estimatePromptTokens(messages), completion_tokens: await estimateTokens(output) };
}
