import type { Tiktoken } from 'js-tiktoken/lite';
import { contentText } from './content.ts';
import { inputList } from '../../protocols/embeddings/input.ts';
import type { TokenUsage, UpstreamCall } from '../types.ts';

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

// BPE merging is quadratic in the length of one pre-tokenized piece, and a client controls the
// text: one 4 MiB "word" would hold the worker's event loop for minutes. So runs of more than
// LONG_RUN non-space characters are encoded in LONG_RUN-character slices (each cut counts at most
// one token more), and past EXACT_CHARS the count is extrapolated from the part counted exactly:
// at most ~0.25 s of CPU for the worst text, ~20 ms for ordinary text. The result is an estimate
// either way (the ledger row says so).
const LONG_RUN = 64;
const EXACT_CHARS = 64 * 1024;
const LONG_RUN_RE = new RegExp(`\\S{${LONG_RUN + 1},}`, 'g');

function countTokens(enc: Tiktoken, text: string): number {
  const exact = text.length <= EXACT_CHARS ? text : text.slice(0, EXACT_CHARS);
  let n = 0;
  let last = 0;
  LONG_RUN_RE.lastIndex = 0;
  for (let m = LONG_RUN_RE.exec(exact); m !== null; m = LONG_RUN_RE.exec(exact)) {
    if (m.index > last) n += enc.encode(exact.slice(last, m.index)).length;
    for (let i = 0; i < m[0].length; ) {
      let end = Math.min(m[0].length, i + LONG_RUN);
      const c = m[0].charCodeAt(end - 1);
      if (end < m[0].length && c >= 0xd800 && c <= 0xdbff) end--; // never split a surrogate pair
      n += enc.encode(m[0].slice(i, end)).length;
      i = end;
    }
    last = m.index + m[0].length;
  }
  if (last < exact.length) n += enc.encode(exact.slice(last)).length;
  return exact.length === text.length ? n : Math.ceil((n * text.length) / exact.length);
}

export async function estimateTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  return countTokens(await getEncoder(), text);
}

export async function estimatePromptTokens(messages: unknown): Promise<number> {
  const enc = await getEncoder();
  let n = 3;
  if (Array.isArray(messages)) {
    for (const raw of messages) {
      const m = (raw ?? {}) as { role?: unknown; content?: unknown; name?: unknown };
      n += 3;
      if (typeof m.role === 'string') n += countTokens(enc, m.role);
      const text = contentText(m.content);
      if (text) n += countTokens(enc, text);
      if (typeof m.name === 'string') n += 1 + countTokens(enc, m.name);
    }
  }
  return n;
}

/** Fields besides the messages a vendor renders into the prompt (their JSON text is counted). */
const PROMPT_FIELDS = ['tools', 'functions', 'response_format'] as const;

/**
 * What the vendor most likely billed for the prompt when it reported nothing (a cancelled or cut
 * request): the messages' text, the JSON of tools / functions / response_format, and each image at
 * the catalog's per-image bound (0 when the catalog gives none).
 */
export async function estimateCallPromptTokens(call: UpstreamCall): Promise<number> {
  const body = call.job.body as Record<string, unknown>;
  if (call.job.api === 'embeddings' || call.job.api === 'completions') return estimateInputTokens(call);
  let n = await estimatePromptTokens(body.messages);
  for (const f of PROMPT_FIELDS) if (body[f] != null) n += await estimateTokens(JSON.stringify(body[f]));
  if (Array.isArray(body.messages)) {
    for (const m of body.messages as Array<{ content?: unknown }>) {
      if (!Array.isArray(m?.content)) continue;
      for (const p of m.content as Array<{ type?: unknown }>) if (p?.type === 'image_url') n += call.model.image_input_tokens ?? 0;
    }
  }
  // a vendor refuses (and does not bill) a prompt longer than the context window
  return Math.min(n, call.model.context_length);
}

export async function estimateUsage(call: UpstreamCall, output: string): Promise<TokenUsage> {
  return { prompt_tokens: await estimateCallPromptTokens(call), completion_tokens: await estimateTokens(output) };
}

/** A token-id input counts its ids; a text is estimated; each at most the context (a longer one is refused, unbilled). */
async function inputTokens(input: unknown, context: number): Promise<number> {
  const n = typeof input === 'string' ? await estimateTokens(input) : Array.isArray(input) ? input.length : 0;
  return Math.min(n, context);
}

/** Embeddings: every input; legacy completions: the one prompt and its suffix (no chat framing). */
async function estimateInputTokens(call: UpstreamCall): Promise<number> {
  const body = call.job.body as Record<string, unknown>;
  const context = call.model.context_length;
  if (call.job.api === 'embeddings') {
    let n = 0;
    for (const input of inputList(body.input)) n += await inputTokens(input, context);
    return n;
  }
  const prompt = Array.isArray(body.prompt) && body.prompt.length === 1 && typeof body.prompt[0] !== 'number' ? body.prompt[0] : body.prompt;
  const suffix = typeof body.suffix === 'string' ? await estimateTokens(body.suffix) : 0;
  return Math.min((await inputTokens(prompt, context)) + suffix, context);
}
