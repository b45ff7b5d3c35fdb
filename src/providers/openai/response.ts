import type { AdapterEvent } from '../types.ts';
import type { ToolCallDelta } from '../../bus/messages.ts';
import { UpstreamError } from '../types.ts';
import { redact } from '../shared/upstream-errors.ts';

// Response transform: one chat.completion.chunk (or a whole chat.completion) → adapter events.

interface ChunkLike {
  choices?: Array<{
    delta?: { content?: unknown; tool_calls?: unknown; reasoning?: unknown; reasoning_content?: unknown };
    message?: { content?: unknown; tool_calls?: unknown; reasoning?: unknown; reasoning_content?: unknown };
    finish_reason?: unknown;
  }> | null;
  usage?: {
    prompt_tokens?: unknown;
    completion_tokens?: unknown;
    prompt_tokens_details?: { cached_tokens?: unknown } | null;
    completion_tokens_details?: { reasoning_tokens?: unknown } | null;
  } | null;
  error?: { message?: unknown } | string;
}

function usageEvent(u: ChunkLike['usage']): AdapterEvent | undefined {
  if (!u || typeof u !== 'object') return undefined;
  const p = u.prompt_tokens;
  const c = u.completion_tokens;
  if (typeof p !== 'number' || typeof c !== 'number' || p < 0 || c < 0) return undefined;
  const ev: AdapterEvent = { type: 'usage', prompt_tokens: Math.round(p), completion_tokens: Math.round(c) };
  // prompt_tokens counts the cache reads too (OpenAI's convention, ours); reasoning is part of completion_tokens
  // (zeros are left out: nothing to bill apart)
  const cached = count(u.prompt_tokens_details?.cached_tokens);
  if (cached) ev.cached_tokens = Math.min(cached, ev.prompt_tokens);
  const reasoning = count(u.completion_tokens_details?.reasoning_tokens);
  if (reasoning) ev.reasoning_tokens = Math.min(reasoning, ev.completion_tokens);
  return ev;
}

const count = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.round(v) : undefined);

/** Upstream tool_calls (streamed pieces, or whole calls of a non-streamed message) → our delta shape. */
function toolCallDeltas(raw: unknown): ToolCallDelta[] | undefined {
  if (!Array.isArray(raw) || raw.length === 0) return undefined;
  const out: ToolCallDelta[] = [];
  raw.forEach((c, i) => {
    if (!c || typeof c !== 'object') return;
    const call = c as { index?: unknown; id?: unknown; type?: unknown; function?: { name?: unknown; arguments?: unknown } };
    const d: ToolCallDelta = { index: typeof call.index === 'number' ? call.index : i };
    if (typeof call.id === 'string') d.id = call.id;
    if (call.type === 'function') d.type = 'function';
    if (call.function && typeof call.function === 'object') {
      d.function = {};
      if (typeof call.function.name === 'string') d.function.name = call.function.name;
      if (typeof call.function.arguments === 'string') d.function.arguments = call.function.arguments;
    }
    out.push(d);
  });
  return out.length ? out : undefined;
}

/** Events of one streamed chunk, pushed onto `out` (no allocation of a result array per chunk). */
export function chunkEvents(chunk: ChunkLike, out: AdapterEvent[], secret: string | null): void {
  if (chunk.error !== undefined) {
    // OpenRouter and others report a mid-stream failure as a data event carrying an error object.
    const m = typeof chunk.error === 'string' ? chunk.error : typeof chunk.error?.message === 'string' ? chunk.error.message : 'unknown error';
    throw new UpstreamError(502, 'upstream_error', `The upstream provider failed mid-stream: ${redact(m, secret).slice(0, 500)}`);
  }
  const choice = chunk.choices?.[0];
  if (choice) {
    const reasoning = choice.delta?.reasoning ?? choice.delta?.reasoning_content;
    if (typeof reasoning === 'string' && reasoning.length > 0) out.push({ type: 'reasoning', content: reasoning });
    const content = choice.delta?.content;
    if (typeof content === 'string' && content.length > 0) out.push({ type: 'delta', content });
    const calls = toolCallDeltas(choice.delta?.tool_calls);
    if (calls) out.push({ type: 'tool_calls', tool_calls: calls });
    if (typeof choice.finish_reason === 'string') out.push({ type: 'finish', reason: choice.finish_reason });
  }
  const u = usageEvent(chunk.usage);
  if (u) out.push(u);
}

/** Events of a non-streamed chat.completion (an upstream that ignored stream: true). */
export function completionEvents(body: ChunkLike, out: AdapterEvent[], secret: string | null): void {
  if (body.error !== undefined) return chunkEvents(body, out, secret);
  const choice = body.choices?.[0];
  const reasoning = choice?.message?.reasoning ?? choice?.message?.reasoning_content;
  if (typeof reasoning === 'string' && reasoning.length > 0) out.push({ type: 'reasoning', content: reasoning });
  const content = choice?.message?.content;
  if (typeof content === 'string' && content.length > 0) out.push({ type: 'delta', content });
  const calls = toolCallDeltas(choice?.message?.tool_calls);
  if (calls) out.push({ type: 'tool_calls', tool_calls: calls });
  out.push({ type: 'finish', reason: typeof choice?.finish_reason === 'string' ? choice.finish_reason : 'stop' });
  const u = usageEvent(body.usage);
  if (u) out.push(u);
}
