import { mapHttpError, redact } from '../shared/upstream-errors.ts';
import { type AdapterEvent, UpstreamError } from '../types.ts';

// Response transform: Gemini's stream (SSE, each data a GenerateContentResponse) → adapter events.
// A candidate's parts: text (a thought when `thought: true`), functionCall (whole, in one chunk:
// it becomes a complete OpenAI tool call, with the vendor's id or one of ours). finishReason ends
// it; usageMetadata is cumulative and the last one counts.
//
// Usage as Google reports it: promptTokenCount includes cachedContentTokenCount; the output
// Google bills is candidatesTokenCount + thoughtsTokenCount (thoughts are not part of the
// candidates' count), so completion_tokens is their sum and reasoning_tokens the thoughts.

const FINISH: Record<string, string> = {
  STOP: 'stop',
  MAX_TOKENS: 'length',
  SAFETY: 'content_filter',
  RECITATION: 'content_filter',
  PROHIBITED_CONTENT: 'content_filter',
  BLOCKLIST: 'content_filter',
  SPII: 'content_filter',
  IMAGE_SAFETY: 'content_filter',
  MALFORMED_FUNCTION_CALL: 'stop',
};

export interface UsageMetadata {
  promptTokenCount?: number;
  candidatesTokenCount?: number;
  cachedContentTokenCount?: number;
  thoughtsTokenCount?: number;
  toolUsePromptTokenCount?: number;
}

const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);

export function usageEvent(u: UsageMetadata): AdapterEvent {
  const thoughts = n(u.thoughtsTokenCount);
  // toolUsePromptTokenCount (the results of Google's own tools) is input Google bills apart from the prompt
  const ev: AdapterEvent = {
    type: 'usage',
    prompt_tokens: n(u.promptTokenCount) + n(u.toolUsePromptTokenCount),
    completion_tokens: n(u.candidatesTokenCount) + thoughts,
  };
  const cached = n(u.cachedContentTokenCount);
  if (cached) ev.cached_tokens = Math.min(cached, ev.prompt_tokens);
  if (thoughts) ev.reasoning_tokens = thoughts;
  return ev;
}

interface Chunk {
  candidates?: Array<{
    content?: { parts?: Array<{ text?: string; thought?: boolean; thoughtSignature?: string; functionCall?: { id?: string; name?: string; args?: unknown } }> };
    finishReason?: string;
  }>;
  promptFeedback?: { blockReason?: string };
  usageMetadata?: UsageMetadata;
  error?: { code?: number; message?: string; status?: string };
}

/** Google's error body: {"error":{"code","message","status"}}; an invalid API key is a 400 INVALID_ARGUMENT. */
export function httpError(status: number, text: string, headers: Record<string, string | string[] | undefined>, secret: string | null): UpstreamError {
  let message = '';
  let reason = '';
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; status?: unknown; details?: Array<{ reason?: unknown }> } };
    message = typeof j.error?.message === 'string' ? j.error.message : '';
    reason = String(j.error?.details?.find((d) => typeof d.reason === 'string')?.reason ?? '');
  } catch {
    /* not JSON */
  }
  if (status === 400 && (reason === 'API_KEY_INVALID' || /api key not valid/i.test(message))) return mapHttpError(401, '', headers, secret);
  if (status === 400 && /input token count.*exceeds|exceeds the maximum number of tokens/i.test(message))
    return new UpstreamError(400, 'context_length_exceeded', redact(message, secret).slice(0, 2000));
  if (status === 503) return new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.');
  return mapHttpError(status, JSON.stringify({ error: { message } }), headers, secret);
}

export function createStreamDecoder(secret: string | null) {
  let tools = 0;
  let usage: UsageMetadata | undefined;
  let finished = false;
  const chunk = (c: Chunk, out: AdapterEvent[]) => {
    if (c.error)
      throw new UpstreamError(
        502,
        'upstream_error',
        `The upstream provider failed mid-stream: ${redact(String(c.error.message ?? 'unknown error'), secret).slice(0, 500)}`,
      );
    if (c.usageMetadata) usage = c.usageMetadata;
    const cand = c.candidates?.[0];
    for (const p of cand?.content?.parts ?? []) {
      if (p.functionCall) {
        const call = {
          index: tools,
          id: p.functionCall.id ?? `call_${tools}`,
          type: 'function' as const,
          function: { name: p.functionCall.name ?? '', arguments: JSON.stringify(p.functionCall.args ?? {}) },
        };
        tools++;
        out.push({ type: 'tool_calls', tool_calls: [call] });
      } else if (typeof p.text === 'string' && p.text.length > 0)
        out.push(p.thought ? { type: 'reasoning', content: p.text } : { type: 'delta', content: p.text });
    }
    const blocked = !cand && c.promptFeedback?.blockReason;
    if ((cand?.finishReason || blocked) && !finished) {
      finished = true;
      const reason = blocked ? 'content_filter' : tools > 0 && cand?.finishReason === 'STOP' ? 'tool_calls' : (FINISH[cand!.finishReason!] ?? 'stop');
      out.push({ type: 'finish', reason });
    }
    if (finished && c.usageMetadata) out.push(usageEvent(c.usageMetadata));
  };
  return {
    data(payload: string, out: AdapterEvent[]): 'done' | void {
      let c: Chunk;
      try {
        c = JSON.parse(payload);
      } catch {
        return;
      }
      if (c && typeof c === 'object') chunk(c, out);
    },
    /** The usage the stream reported last (for a whole response). */
    get usage() {
      return usage;
    },
  };
}

/** A whole generateContent response. */
export function completionEvents(body: Chunk, out: AdapterEvent[], secret: string | null): void {
  const d = createStreamDecoder(secret);
  d.data(JSON.stringify(body), out);
  if (!out.some((e) => e.type === 'finish')) out.push({ type: 'finish', reason: 'stop' });
  if (!out.some((e) => e.type === 'usage') && body.usageMetadata) out.push(usageEvent(body.usageMetadata));
}
