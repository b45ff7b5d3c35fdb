import type { Job } from '../../bus/messages.ts';
import { contentText, splitTokens } from './tokens.ts';

// What the sim says for a job (the sim's "request transform"): the full token list before the
// max_tokens cut, and the per-request latency and failure knobs.
//
//   sim/echo   upstream_model "echo":  the text of the last user message, verbatim.
//   sim/lorem  upstream_model "lorem": deterministic lorem-ipsum words, always the same sequence
//              starting at "Lorem"; natural length 64 tokens (override with body.sim.output_tokens).
//   anything else: treated as "lorem".
//
// Then the output is cut at job.max_tokens tokens (finish_reason "length", otherwise "stop").
//
// Body extension (stripped before any real upstream):
//   sim: { first_token_ms?, tokens_per_second?, output_tokens?, fail_after_tokens? }

export const LOREM_DEFAULT_TOKENS = 64;
export const LOREM_WORDS = (
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore ' +
  'magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo ' +
  'consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. ' +
  'Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.'
).split(' ');

/** The first `n` lorem tokens: "Lorem", " ipsum", " dolor", … cycling through LOREM_WORDS. */
export function loremTokens(n: number): string[] {
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) out[i] = (i === 0 ? '' : ' ') + LOREM_WORDS[i % LOREM_WORDS.length];
  return out;
}

export interface SimOptions {
  first_token_ms?: number;
  tokens_per_second?: number;
  output_tokens?: number;
  fail_after_tokens?: number;
}

const nonNegInt = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : undefined);

export function simOptions(body: Record<string, unknown>): SimOptions {
  const s = body.sim;
  if (!s || typeof s !== 'object') return {};
  const o = s as Record<string, unknown>;
  return {
    first_token_ms: nonNegInt(o.first_token_ms),
    tokens_per_second: nonNegInt(o.tokens_per_second),
    output_tokens: nonNegInt(o.output_tokens),
    fail_after_tokens: nonNegInt(o.fail_after_tokens),
  };
}

export function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m && m.role === 'user') return contentText(m.content);
  }
  return '';
}

/** The tokens the sim would say with no max_tokens cut. */
export function simNaturalOutput(job: Job, upstreamModel: string, opts: SimOptions = simOptions(job.body)): string[] {
  if (upstreamModel === 'echo') return splitTokens(lastUserText(job.body.messages));
  return loremTokens(opts.output_tokens ?? LOREM_DEFAULT_TOKENS);
}
