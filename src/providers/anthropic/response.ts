import { redact } from '../shared/upstream-errors.ts';
import { type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';

// Response transform: Anthropic's stream events (message_start, content_block_start / _delta,
// message_delta, message_stop, ping, error) → adapter events: text, tool_use (as OpenAI-shaped
// tool-call pieces), thinking (reasoning, its signature), redacted thinking, the stop reason and
// stop sequence. Input tokens arrive in message_start (cache reads and writes apart), output
// tokens (cumulative) in message_delta; usage is emitted at message_stop.

const FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
};
export const finishReason = (stop: unknown) => (typeof stop === 'string' ? (FINISH[stop] ?? stop) : 'stop');

interface Usage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null;
  output_tokens_details?: { thinking_tokens?: number | null } | null;
}

/** Anthropic's input counts in our convention: the prompt is everything billed as input, cache reads and writes included. */
export interface InputCounts {
  prompt_tokens: number;
  cached_tokens?: number;
  cache_write_tokens?: number;
  cache_write_1h_tokens?: number;
}

/**
 * input_tokens excludes what was read from or written to the cache; the writes are split by
 * lifetime in cache_creation (all 5-minute writes when the vendor gives no split).
 */
export function inputCounts(u: Usage): InputCounts {
  const read = u.cache_read_input_tokens ?? 0;
  const write1h = u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  const write5m =
    u.cache_creation_input_tokens != null ? Math.max(0, u.cache_creation_input_tokens - write1h) : (u.cache_creation?.ephemeral_5m_input_tokens ?? 0);
  const out: InputCounts = { prompt_tokens: (u.input_tokens ?? 0) + read + write5m + write1h };
  if (read > 0) out.cached_tokens = read;
  if (write5m > 0) out.cache_write_tokens = write5m;
  if (write1h > 0) out.cache_write_1h_tokens = write1h;
  return out;
}

const hasInput = (u: Usage) => u.input_tokens != null || u.cache_read_input_tokens != null || u.cache_creation_input_tokens != null;

/**
 * message_start's usage (a whole Usage, with the cache_creation lifetime split) updated by a
 * message_delta's (MessageDeltaUsage: cumulative input_tokens, cache_read_input_tokens and
 * cache_creation_input_tokens, but no cache_creation split). A count the delta carries replaces
 * message_start's; the split is the delta's own when it has one, else message_start's, and when
 * the delta's write total differs from that split's total the difference is attributed so:
 *   - more writes: to the 1-hour writes when every write message_start reported was a 1-hour one
 *     (the same request's markers), else to the 5-minute writes (a write without a split is a
 *     5-minute write: docs/billing.md);
 *   - fewer writes: taken from the 5-minute writes first, then from the 1-hour ones (when every
 *     write was a 1-hour one, from those).
 */
export function mergeDeltaUsage(start: Usage, delta: Usage): Usage {
  const merged: Usage = {
    ...start,
    input_tokens: delta.input_tokens ?? start.input_tokens,
    cache_read_input_tokens: delta.cache_read_input_tokens ?? start.cache_read_input_tokens,
  };
  if (delta.cache_creation) return { ...merged, cache_creation_input_tokens: delta.cache_creation_input_tokens, cache_creation: delta.cache_creation };
  const total = delta.cache_creation_input_tokens;
  if (total == null) return merged;
  const w5m = start.cache_creation?.ephemeral_5m_input_tokens ?? 0;
  const w1h = start.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  // message_start's writes with no split (or none at all): the delta's total is all 5-minute writes (inputCounts)
  if (!start.cache_creation) return { ...merged, cache_creation_input_tokens: total, cache_creation: null };
  const diff = total - (w5m + w1h);
  let split: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
  if (diff >= 0)
    split =
      w5m === 0 && w1h > 0
        ? { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: w1h + diff }
        : { ephemeral_5m_input_tokens: w5m + diff, ephemeral_1h_input_tokens: w1h };
  else {
    const from5m = Math.min(w5m, -diff);
    split = { ephemeral_5m_input_tokens: w5m - from5m, ephemeral_1h_input_tokens: Math.max(0, w1h - (-diff - from5m)) };
  }
  return { ...merged, cache_creation_input_tokens: total, cache_creation: split };
}

function streamError(err: { type?: unknown; message?: unknown } | undefined, secret: string | null): UpstreamError {
  if (err?.type === 'overloaded_error') return new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.');
  const m = typeof err?.message === 'string' ? redact(err.message, secret).slice(0, 500) : 'unknown error';
  return new UpstreamError(502, 'upstream_error', `The upstream provider failed mid-stream: ${m}`);
}

interface StreamEvent {
  type?: string;
  index?: number;
  message?: { usage?: Usage };
  content_block?: { type?: string; id?: string; name?: string; thinking?: string; signature?: string; data?: string; text?: string };
  delta?: { type?: string; text?: string; partial_json?: string; thinking?: string; signature?: string; stop_reason?: unknown; stop_sequence?: unknown };
  usage?: Usage;
  error?: { type?: unknown; message?: unknown };
}

/** The events a content block's start carries: a tool call's id and name, a redacted block's data, thinking already there. */
function blockStart(ev: StreamEvent, toolIndexOfBlock: Map<number, number>, out: AdapterEvent[]): void {
  const block = ev.content_block;
  if (block?.type === 'tool_use' && typeof ev.index === 'number') {
    const index = toolIndexOfBlock.size;
    toolIndexOfBlock.set(ev.index, index);
    out.push({ type: 'tool_calls', tool_calls: [{ index, id: block.id, type: 'function', function: { name: block.name, arguments: '' } }] });
  } else if (block?.type === 'thinking') {
    if (block.thinking) out.push({ type: 'reasoning', content: block.thinking });
    if (block.signature) out.push({ type: 'reasoning_signature', signature: block.signature });
  } else if (block?.type === 'redacted_thinking' && typeof block.data === 'string') {
    out.push({ type: 'redacted_reasoning', data: block.data });
  } else if (block?.type === 'text' && block.text) out.push({ type: 'delta', content: block.text });
}

function blockDelta(ev: StreamEvent, toolIndexOfBlock: Map<number, number>, out: AdapterEvent[]): void {
  const d = ev.delta;
  switch (d?.type) {
    case 'text_delta':
      if (typeof d.text === 'string' && d.text.length > 0) out.push({ type: 'delta', content: d.text });
      return;
    case 'input_json_delta': {
      const index = toolIndexOfBlock.get(ev.index ?? -1);
      if (index !== undefined && typeof d.partial_json === 'string' && d.partial_json.length > 0)
        out.push({ type: 'tool_calls', tool_calls: [{ index, function: { arguments: d.partial_json } }] });
      return;
    }
    case 'thinking_delta':
      if (typeof d.thinking === 'string' && d.thinking.length > 0) out.push({ type: 'reasoning', content: d.thinking });
      return;
    case 'signature_delta':
      if (typeof d.signature === 'string') out.push({ type: 'reasoning_signature', signature: d.signature });
      return;
  }
}

const finishEvent = (stop: unknown, sequence: unknown): AdapterEvent =>
  typeof sequence === 'string' ? { type: 'finish', reason: finishReason(stop), stop_sequence: sequence } : { type: 'finish', reason: finishReason(stop) };

/**
 * The vendor's own count of the output spent thinking: `output_tokens_details.thinking_tokens`,
 * which newer versions of the Messages API send (a part of output_tokens, never more); older ones
 * send nothing, and the adapter counts the thinking text it received instead (index.ts).
 */
const thinkingTokens = (u: Usage | undefined) => {
  const n = u?.output_tokens_details?.thinking_tokens;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 ? Math.min(n, u?.output_tokens ?? n) : undefined;
};

export function createStreamDecoder(secret: string | null) {
  let input: InputCounts = { prompt_tokens: 0 };
  /** message_start's usage as the deltas updated it */
  let startUsage: Usage = {};
  let output = 0;
  let reasoning: number | undefined;
  // Anthropic numbers content blocks (text, thinking and tool_use together); OpenAI numbers tool calls.
  const toolIndexOfBlock = new Map<number, number>();
  return {
    data(payload: string, out: AdapterEvent[]): 'done' | void {
      let ev: StreamEvent;
      try {
        ev = JSON.parse(payload);
      } catch {
        return;
      }
      switch (ev.type) {
        case 'message_start':
          if (ev.message?.usage) {
            startUsage = ev.message.usage;
            input = inputCounts(startUsage);
            output = ev.message.usage.output_tokens ?? 0;
            // the exact prompt count, known before any output: what a cancel bills for the prompt
            out.push({ type: 'prompt_usage', ...input });
          }
          return;
        case 'content_block_start':
          return blockStart(ev, toolIndexOfBlock, out);
        case 'content_block_delta':
          return blockDelta(ev, toolIndexOfBlock, out);
        case 'message_delta':
          // usage here is cumulative; input counts are repeated by newer API versions, without the
          // cache_creation lifetime split: message_start's split is kept (mergeDeltaUsage)
          if (typeof ev.usage?.output_tokens === 'number') output = ev.usage.output_tokens;
          if (ev.usage && hasInput(ev.usage)) {
            startUsage = mergeDeltaUsage(startUsage, ev.usage);
            input = inputCounts(startUsage);
          }
          reasoning = thinkingTokens(ev.usage) ?? reasoning;
          if (ev.delta?.stop_reason != null) out.push(finishEvent(ev.delta.stop_reason, ev.delta.stop_sequence));
          return;
        case 'message_stop':
          out.push({ type: 'usage', ...input, completion_tokens: output, ...(reasoning !== undefined ? { reasoning_tokens: reasoning } : {}) });
          return 'done';
        case 'error':
          throw streamError(ev.error, secret);
        default:
          return; // ping, content_block_stop, and event types added later
      }
    },
  };
}

type WholeBlock = { type?: string; text?: string; id?: string; name?: string; input?: unknown; thinking?: string; signature?: string; data?: string };

/** A whole (non-streamed) Messages response, or a token count's answer. */
export function completionEvents(
  body: {
    content?: WholeBlock[];
    stop_reason?: unknown;
    stop_sequence?: unknown;
    usage?: Usage;
    input_tokens?: unknown;
    error?: { type?: unknown; message?: unknown };
  },
  out: AdapterEvent[],
  secret: string | null,
  call?: UpstreamCall,
): void {
  if (body.error) throw streamError(body.error, secret);
  if (call?.job.api === 'count_tokens') {
    if (typeof body.input_tokens !== 'number') throw new UpstreamError(502, 'upstream_error', 'The upstream provider sent an unreadable token count.');
    out.push({ type: 'body', json: JSON.stringify({ input_tokens: body.input_tokens }) });
    out.push({ type: 'finish', reason: 'stop' });
    out.push({ type: 'usage', prompt_tokens: body.input_tokens, completion_tokens: 0 });
    return;
  }
  let tools = 0;
  for (const c of body.content ?? []) {
    if (c.type === 'text' && c.text) out.push({ type: 'delta', content: c.text });
    else if (c.type === 'thinking') {
      if (c.thinking) out.push({ type: 'reasoning', content: c.thinking });
      out.push({ type: 'reasoning_signature', signature: c.signature ?? '' });
    } else if (c.type === 'redacted_thinking' && typeof c.data === 'string') out.push({ type: 'redacted_reasoning', data: c.data });
    else if (c.type === 'tool_use') {
      const call = { index: tools++, id: c.id, type: 'function' as const, function: { name: c.name, arguments: JSON.stringify(c.input ?? {}) } };
      out.push({ type: 'tool_calls', tool_calls: [call] });
    }
  }
  out.push(finishEvent(body.stop_reason, body.stop_sequence));
  if (body.usage) {
    const reasoning = thinkingTokens(body.usage);
    out.push({
      type: 'usage',
      ...inputCounts(body.usage),
      completion_tokens: body.usage.output_tokens ?? 0,
      ...(reasoning !== undefined ? { reasoning_tokens: reasoning } : {}),
    });
  }
}
