import { EventStreamCodec } from '@smithy/core/event-streams';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import type { ByteStreamDecoder } from '../shared/http-stream.ts';
import { mapHttpError, parseRetryAfter, redact } from '../shared/upstream-errors.ts';
import { type AdapterEvent, UpstreamError } from '../types.ts';

// Response transform: ConverseStream's event stream (application/vnd.amazon.eventstream: binary
// frames, each with :message-type, :event-type or :exception-type headers and a JSON payload) →
// adapter events. messageStart, contentBlockStart (a toolUse's id and name), contentBlockDelta
// (text, toolUse input pieces, reasoningContent text and signature), contentBlockStop, messageStop
// (the stop reason), metadata (usage). An exception frame fails the call.
//
// Usage as Bedrock reports it: inputTokens excludes what was read from or written to the prompt
// cache (cacheReadInputTokens, cacheWriteInputTokens); ours is everything billed as input, those
// included. Reasoning is billed inside outputTokens, which gives no part of it apart (the adapter
// counts the reasoning text, as for Anthropic).

const FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  guardrail_intervened: 'content_filter',
  content_filtered: 'content_filter',
};

interface BedrockUsage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadInputTokens?: number;
  cacheWriteInputTokens?: number;
}

const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);

export function usageEvent(u: BedrockUsage): AdapterEvent {
  const read = n(u.cacheReadInputTokens);
  const write = n(u.cacheWriteInputTokens);
  const ev: AdapterEvent = { type: 'usage', prompt_tokens: n(u.inputTokens) + read + write, completion_tokens: n(u.outputTokens) };
  if (read) ev.cached_tokens = read;
  if (write) ev.cache_write_tokens = write;
  return ev;
}

/** A vendor exception (an HTTP error's x-amzn-errortype, or an exception frame's :exception-type). */
function exceptionError(type: string, message: string, secret: string | null): UpstreamError {
  const m = redact(message, secret).slice(0, 500);
  switch (type.replace(/^[a-z]/, (c) => c.toUpperCase())) {
    case 'ThrottlingException':
    case 'ServiceQuotaExceededException':
      return new UpstreamError(429, 'upstream_rate_limited', 'The upstream provider is rate limiting requests; retry shortly.');
    case 'ServiceUnavailableException':
      return new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.');
    case 'ModelTimeoutException':
      return new UpstreamError(504, 'upstream_timeout', 'The upstream provider timed out.');
    case 'ValidationException':
      return new UpstreamError(400, 'upstream_bad_request', m);
    default:
      return new UpstreamError(502, 'upstream_error', `The upstream provider failed mid-stream: ${m}`);
  }
}

const TOO_LONG = /input is too long|too many input tokens|prompt is too long|context window/i;

/** Bedrock's HTTP errors: {"message": …} with the exception's name in x-amzn-errortype. */
export function httpError(status: number, text: string, headers: Record<string, string | string[] | undefined>, secret: string | null): UpstreamError {
  let message = '';
  try {
    const j = JSON.parse(text) as { message?: unknown; Message?: unknown };
    message = String(j.message ?? j.Message ?? '');
  } catch {
    /* not JSON */
  }
  const rawType = headers['x-amzn-errortype'];
  const type = (Array.isArray(rawType) ? rawType[0] : rawType)?.split(':')[0] ?? '';
  if (status === 400 && TOO_LONG.test(message)) return new UpstreamError(400, 'context_length_exceeded', redact(message, secret).slice(0, 2000));
  if (status === 429) {
    const retry = parseRetryAfter(headers);
    return new UpstreamError(
      429,
      'upstream_rate_limited',
      retry !== undefined
        ? `The upstream provider is rate limiting requests; retry after ${retry} s.`
        : 'The upstream provider is rate limiting requests; retry shortly.',
      retry,
    );
  }
  if (status === 503 || type === 'ServiceUnavailableException')
    return new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.');
  if (status === 424) return new UpstreamError(502, 'upstream_error', 'The upstream model failed (HTTP 424).');
  return mapHttpError(status, JSON.stringify({ error: { message } }), headers, secret);
}

interface StreamPayload {
  contentBlockIndex?: number;
  start?: { toolUse?: { toolUseId?: string; name?: string } };
  delta?: { text?: string; toolUse?: { input?: string }; reasoningContent?: { text?: string; signature?: string; redactedContent?: string } };
  stopReason?: string;
  usage?: BedrockUsage;
  message?: string;
}

const codec = new EventStreamCodec(toUtf8, fromUtf8);

export function createByteStreamDecoder(secret: string | null): ByteStreamDecoder {
  let pending: Buffer = Buffer.alloc(0);
  // Bedrock numbers content blocks (text, reasoning, toolUse together); OpenAI numbers tool calls
  const toolIndexOfBlock = new Map<number, number>();
  const frame = (bytes: Uint8Array, out: AdapterEvent[]) => {
    const msg = codec.decode(bytes);
    const header = (name: string) => {
      const h = msg.headers[name];
      return h && h.type === 'string' ? h.value : undefined;
    };
    let payload: StreamPayload = {};
    try {
      payload = JSON.parse(toUtf8(msg.body) || '{}');
    } catch {
      /* an empty or unreadable payload */
    }
    const kind = header(':message-type');
    if (kind === 'exception' || kind === 'error')
      throw exceptionError(header(':exception-type') ?? header(':error-code') ?? '', String(payload.message ?? header(':error-message') ?? ''), secret);
    switch (header(':event-type')) {
      case 'contentBlockStart': {
        const tool = payload.start?.toolUse;
        if (tool && typeof payload.contentBlockIndex === 'number') {
          const index = toolIndexOfBlock.size;
          toolIndexOfBlock.set(payload.contentBlockIndex, index);
          out.push({ type: 'tool_calls', tool_calls: [{ index, id: tool.toolUseId, type: 'function', function: { name: tool.name, arguments: '' } }] });
        }
        return;
      }
      case 'contentBlockDelta': {
        const d = payload.delta;
        if (typeof d?.text === 'string' && d.text.length > 0) out.push({ type: 'delta', content: d.text });
        else if (typeof d?.toolUse?.input === 'string' && d.toolUse.input.length > 0) {
          const index = toolIndexOfBlock.get(payload.contentBlockIndex ?? -1);
          if (index !== undefined) out.push({ type: 'tool_calls', tool_calls: [{ index, function: { arguments: d.toolUse.input } }] });
        } else if (d?.reasoningContent) {
          const r = d.reasoningContent;
          if (typeof r.text === 'string' && r.text.length > 0) out.push({ type: 'reasoning', content: r.text });
          if (typeof r.signature === 'string') out.push({ type: 'reasoning_signature', signature: r.signature });
          if (typeof r.redactedContent === 'string') out.push({ type: 'redacted_reasoning', data: r.redactedContent });
        }
        return;
      }
      case 'messageStop':
        out.push({ type: 'finish', reason: FINISH[payload.stopReason ?? ''] ?? payload.stopReason ?? 'stop' });
        return;
      case 'metadata':
        if (payload.usage) out.push(usageEvent(payload.usage));
        return;
      default:
        return; // messageStart, contentBlockStop, event types added later
    }
  };
  return {
    push(chunk, out) {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      // each frame starts with its total length (4 bytes, big-endian)
      while (pending.length >= 4) {
        const total = pending.readUInt32BE(0);
        if (pending.length < total) break;
        const bytes = pending.subarray(0, total);
        pending = pending.subarray(total);
        frame(bytes, out);
      }
    },
    end() {
      if (pending.length > 0) throw new UpstreamError(502, 'upstream_stream_interrupted', 'The upstream stream ended before it finished.');
    },
  };
}

type WholeBlock = {
  text?: string;
  toolUse?: { toolUseId?: string; name?: string; input?: unknown };
  reasoningContent?: { reasoningText?: { text?: string; signature?: string } };
};

/** A whole Converse response (a vendor or proxy that answered /converse-stream with JSON). */
export function completionEvents(
  body: { output?: { message?: { content?: WholeBlock[] } }; stopReason?: string; usage?: BedrockUsage; message?: string },
  out: AdapterEvent[],
): void {
  let tools = 0;
  for (const c of body.output?.message?.content ?? []) {
    if (typeof c.text === 'string' && c.text) out.push({ type: 'delta', content: c.text });
    else if (c.reasoningContent?.reasoningText) {
      const r = c.reasoningContent.reasoningText;
      if (r.text) out.push({ type: 'reasoning', content: r.text });
      if (r.signature) out.push({ type: 'reasoning_signature', signature: r.signature });
    } else if (c.toolUse) {
      const t = c.toolUse;
      out.push({
        type: 'tool_calls',
        tool_calls: [{ index: tools++, id: t.toolUseId, type: 'function', function: { name: t.name, arguments: JSON.stringify(t.input ?? {}) } }],
      });
    }
  }
  out.push({ type: 'finish', reason: FINISH[body.stopReason ?? ''] ?? body.stopReason ?? 'stop' });
  if (body.usage) out.push(usageEvent(body.usage));
}
