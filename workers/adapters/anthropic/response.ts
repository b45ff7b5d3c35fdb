import { redact } from '../shared/upstream-errors.ts';
import { type AdapterEvent, UpstreamError } from '../types.ts';

// Response transform: Anthropic's stream events (message_start, content_block_delta,
// message_delta, message_stop, ping, error) → adapter events. Input tokens arrive in
// message_start, output tokens (cumulative) in message_delta; usage is emitted at message_stop.

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
  input_tokens?: number;
  output_tokens?: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}
/** Cached input is still input the tenant pays for at the catalog's input price. */
const inputOf = (u: Usage) => (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);

function streamError(err: { type?: unknown; message?: unknown } | undefined, secret: string | null): UpstreamError {
  if (err?.type === 'overloaded_error') return new UpstreamError(503, 'upstream_overloaded', 'The upstream provider is overloaded; retry shortly.');
  const m = typeof err?.message === 'string' ? redact(err.message, secret).slice(0, 500) : 'unknown error';
  return new UpstreamError(502, 'upstream_error', `The upstream provider failed mid-stream: ${m}`);
}

export function createStreamDecoder(secret: string | null) {
  let input = 0;
  let output = 0;
  // Anthropic numbers content blocks (text and tool_use together); OpenAI numbers tool calls.
  const toolIndexOfBlock = new Map<number, number>();
  return {
    data(payload: string, out: AdapterEvent[]): 'done' | void {
      let ev: {
        type?: string;
        index?: number;
        message?: { usage?: Usage };
        content_block?: { type?: string; id?: string; name?: string };
        delta?: { type?: string; text?: string; partial_json?: string; stop_reason?: unknown };
        usage?: Usage;
        error?: { type?: unknown; message?: unknown };
      };
      try {
        ev = JSON.parse(payload);
      } catch {
        return;
      }
      switch (ev.type) {
        case 'message_start':
          if (ev.message?.usage) {
            input = inputOf(ev.message.usage);
            output = ev.message.usage.output_tokens ?? 0;
            // the exact prompt count, known before any output: what a cancel bills for the prompt
            out.push({ type: 'prompt_usage', prompt_tokens: input });
          }
          return;
        case 'content_block_start':
          if (ev.content_block?.type === 'tool_use' && typeof ev.index === 'number') {
            const index = toolIndexOfBlock.size;
            toolIndexOfBlock.set(ev.index, index);
            out.push({
              type: 'tool_calls',
              tool_calls: [{ index, id: ev.content_block.id, type: 'function', function: { name: ev.content_block.name, arguments: '' } }],
            });
          }
          return;
        case 'content_block_delta':
          if (ev.delta?.type === 'text_delta' && typeof ev.delta.text === 'string' && ev.delta.text.length > 0)
            out.push({ type: 'delta', content: ev.delta.text });
          else if (ev.delta?.type === 'input_json_delta' && typeof ev.delta.partial_json === 'string' && ev.delta.partial_json.length > 0) {
            const index = toolIndexOfBlock.get(ev.index ?? -1);
            if (index !== undefined) out.push({ type: 'tool_calls', tool_calls: [{ index, function: { arguments: ev.delta.partial_json } }] });
          }
          return;
        case 'message_delta':
          if (typeof ev.usage?.output_tokens === 'number') output = ev.usage.output_tokens;
          if (ev.delta?.stop_reason != null) out.push({ type: 'finish', reason: finishReason(ev.delta.stop_reason) });
          return;
        case 'message_stop':
          out.push({ type: 'usage', prompt_tokens: input, completion_tokens: output });
          return 'done';
        case 'error':
          throw streamError(ev.error, secret);
        default:
          return; // ping, content_block_stop, and event types added later
      }
    },
  };
}

/** A whole (non-streamed) Messages response. */
export function completionEvents(
  body: {
    content?: Array<{ type?: string; text?: string; id?: string; name?: string; input?: unknown }>;
    stop_reason?: unknown;
    usage?: Usage;
    error?: { type?: unknown; message?: unknown };
  },
  out: AdapterEvent[],
  secret: string | null,
): void {
  if (body.error) throw streamError(body.error, secret);
  const text = (body.content ?? [])
    .filter((c) => c.type === 'text' && typeof c.text === 'string')
    .map((c) => c.text)
    .join('');
  if (text) out.push({ type: 'delta', content: text });
  const uses = (body.content ?? []).filter((c) => c.type === 'tool_use');
  if (uses.length) {
    out.push({
      type: 'tool_calls',
      tool_calls: uses.map((c, index) => ({
        index,
        id: c.id,
        type: 'function' as const,
        function: { name: c.name, arguments: JSON.stringify(c.input ?? {}) },
      })),
    });
  }
  out.push({ type: 'finish', reason: finishReason(body.stop_reason) });
  if (body.usage) out.push({ type: 'usage', prompt_tokens: inputOf(body.usage), completion_tokens: body.usage.output_tokens ?? 0 });
}
