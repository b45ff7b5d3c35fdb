import { type UpstreamCall, UpstreamError } from '../types.ts';

// Request transform: an OpenAI chat request → Anthropic Messages. System and developer messages
// become `system`; tools, tool_choice, assistant tool calls and tool results are translated to
// Anthropic's tools / tool_use / tool_result blocks; the OpenAI parameters Anthropic has are
// mapped and the rest is not sent (the Messages API rejects unknown fields). Non-text parts are
// refused with a clear 400 rather than silently dropped.

type Part = { type?: unknown; text?: unknown };
type Block = Record<string, unknown>;
type AnthropicMessage = { role: 'user' | 'assistant'; content: string | Block[] };

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

function toolUseBlocks(calls: unknown, where: string): Block[] {
  if (!Array.isArray(calls)) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool_calls must be an array.`);
  return calls.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, j) => {
    let input: unknown = {};
    try {
      input = c.function?.arguments ? JSON.parse(String(c.function.arguments)) : {};
    } catch {
      throw new UpstreamError(400, 'invalid_tool_arguments', `${where}.tool_calls[${j}]: function.arguments is not valid JSON.`);
    }
    return { type: 'tool_use', id: String(c.id ?? ''), name: String(c.function?.name ?? ''), input };
  });
}

function tools(raw: unknown): Block[] {
  if (!Array.isArray(raw)) throw new UpstreamError(400, 'unsupported_parameter', 'tools must be an array.');
  return raw.map((t: { type?: unknown; function?: { name?: unknown; description?: unknown; parameters?: unknown } }, i) => {
    if (t.type !== 'function' || !t.function?.name)
      throw new UpstreamError(400, 'unsupported_parameter', `tools[${i}]: only function tools are supported for this model.`);
    const out: Block = { name: t.function.name, input_schema: t.function.parameters ?? { type: 'object', properties: {} } };
    if (typeof t.function.description === 'string') out.description = t.function.description;
    return out;
  });
}

function toolChoice(raw: unknown): Block | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (raw === 'auto') return { type: 'auto' };
  if (raw === 'required') return { type: 'any' };
  if (raw === 'none') return { type: 'none' };
  const name = (raw as { function?: { name?: unknown } })?.function?.name;
  if (typeof name === 'string') return { type: 'tool', name };
  throw new UpstreamError(400, 'unsupported_parameter', 'tool_choice is not one this model understands.');
}

export function buildAnthropicBody({ job, model }: UpstreamCall): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  if (b.functions) throw new UpstreamError(400, 'unsupported_parameter', 'The legacy functions parameter is not supported for this model; use tools.');
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  ((b.messages as Array<Record<string, unknown>>) ?? []).forEach((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'system' || m.role === 'developer') system.push(text(m.content, where));
    else if (m.role === 'user') messages.push({ role: 'user', content: text(m.content, where) });
    else if (m.role === 'assistant') {
      if (!m.tool_calls) messages.push({ role: 'assistant', content: text(m.content, where) });
      else {
        const said = text(m.content, where);
        messages.push({ role: 'assistant', content: [...(said ? [{ type: 'text', text: said }] : []), ...toolUseBlocks(m.tool_calls, where)] });
      }
    } else if (m.role === 'tool') {
      // tool results go back in a user turn; consecutive results share one
      const block = { type: 'tool_result', tool_use_id: String(m.tool_call_id ?? ''), content: text(m.content, where) };
      const prev = messages[messages.length - 1];
      if (prev?.role === 'user' && Array.isArray(prev.content) && prev.content.every((x) => x.type === 'tool_result')) prev.content.push(block);
      else messages.push({ role: 'user', content: [block] });
    } else throw new UpstreamError(400, 'unsupported_parameter', `${where}: role "${String(m.role)}" is not supported for this model.`);
  });
  const out: Record<string, unknown> = { model: model.upstream_model, max_tokens: job.max_tokens, messages, stream: true };
  if (system.length) out.system = system.join('\n\n');
  if (b.tools !== undefined && b.tools !== null) out.tools = tools(b.tools);
  const choice = toolChoice(b.tool_choice);
  if (choice) out.tool_choice = choice;
  if (typeof b.temperature === 'number') out.temperature = Math.min(1, b.temperature); // Anthropic's range is 0–1
  if (typeof b.top_p === 'number') out.top_p = b.top_p;
  if (typeof b.top_k === 'number') out.top_k = b.top_k;
  if (typeof b.stop === 'string') out.stop_sequences = [b.stop];
  else if (Array.isArray(b.stop)) out.stop_sequences = b.stop;
  if (typeof b.user === 'string') out.metadata = { user_id: b.user };
  return out;
}
