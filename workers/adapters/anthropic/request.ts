import type { Job } from '../../../src/bus/messages.ts';
import { UpstreamError } from '../types.ts';

// Request transform: an OpenAI chat request → Anthropic Messages. System and developer messages
// become `system`; the OpenAI parameters Anthropic has are mapped; the rest is not sent (the
// Messages API rejects unknown fields). Tool calls and non-text parts are refused with a clear 400
// rather than silently dropped.

type Part = { type?: unknown; text?: unknown };

function text(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (content == null) return '';
  if (Array.isArray(content)) {
    return (content as Part[])
      .map((p) => {
        if (p?.type === 'text' && typeof p.text === 'string') return p.text;
        throw new UpstreamError(400, 'unsupported_content', `${where}: only text content parts can be sent to this model.`);
      })
      .join('\n');
  }
  throw new UpstreamError(400, 'unsupported_content', `${where}: unsupported content.`);
}

export function buildAnthropicBody(job: Job): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  if (b.tools || b.functions) throw new UpstreamError(400, 'unsupported_parameter', 'Tool calling is not supported for this model yet.');
  const system: string[] = [];
  const messages: Array<{ role: 'user' | 'assistant'; content: string }> = [];
  ((b.messages as Array<Record<string, unknown>>) ?? []).forEach((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'system' || m.role === 'developer') system.push(text(m.content, where));
    else if (m.role === 'user' || m.role === 'assistant') {
      if (m.tool_calls) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool calls are not supported for this model yet.`);
      messages.push({ role: m.role, content: text(m.content, where) });
    } else throw new UpstreamError(400, 'unsupported_parameter', `${where}: role "${String(m.role)}" is not supported for this model.`);
  });
  const out: Record<string, unknown> = { model: job.model.upstream_model, max_tokens: job.max_tokens, messages, stream: true };
  if (system.length) out.system = system.join('\n\n');
  if (typeof b.temperature === 'number') out.temperature = Math.min(1, b.temperature); // Anthropic's range is 0–1
  if (typeof b.top_p === 'number') out.top_p = b.top_p;
  if (typeof b.stop === 'string') out.stop_sequences = [b.stop];
  else if (Array.isArray(b.stop)) out.stop_sequences = b.stop;
  if (typeof b.user === 'string') out.metadata = { user_id: b.user };
  return out;
}
