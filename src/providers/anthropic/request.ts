import { validToolId } from '../../protocols/messages/tool-ids.ts';
import { REASONING_EFFORTS, type Reasoning, thinkingBudget } from '../../chat/reasoning.ts';
import { type UpstreamCall, UpstreamError } from '../types.ts';

// Request transform: an OpenAI chat request → Anthropic Messages. System and developer messages
// become `system`; tools, tool_choice, assistant tool calls and tool results are translated to
// Anthropic's tools / tool_use / tool_result blocks; the OpenAI parameters Anthropic has are
// mapped and the rest is not sent (the Messages API rejects unknown fields). Content parts keep
// their `cache_control` (OpenRouter-style prompt caching) and image parts become image blocks
// (a data: URL → a base64 source, else a url source); other parts are refused with a clear 400
// rather than silently dropped. Plain text parts without a cache marker are joined into a string.
// Tool-call ids another vendor made are made valid for Anthropic (tool-ids.ts).

type Part = { type?: unknown; text?: unknown; image_url?: { url?: unknown } | string; cache_control?: unknown };
type Block = Record<string, unknown>;
type AnthropicMessage = { role: 'user' | 'assistant'; content: string | Block[] };

const DATA_URL = /^data:([^;,]+);base64,(.*)$/s;

function imageBlock(p: Part, where: string): Block {
  const url = typeof p.image_url === 'string' ? p.image_url : p.image_url?.url;
  if (typeof url !== 'string' || !url) throw new UpstreamError(400, 'unsupported_content', `${where}: image_url.url is required.`);
  const data = DATA_URL.exec(url);
  return { type: 'image', source: data ? { type: 'base64', media_type: data[1], data: data[2] } : { type: 'url', url } };
}

function block(p: Part, where: string): Block {
  let out: Block;
  if (p?.type === 'text' && typeof p.text === 'string') out = { type: 'text', text: p.text };
  else if (p?.type === 'image_url') out = imageBlock(p, where);
  else throw new UpstreamError(400, 'unsupported_content', `${where}: only text and image content parts can be sent to this model.`);
  if (p.cache_control != null) out.cache_control = p.cache_control;
  return out;
}

/** Content as Anthropic takes it: a string, or blocks when a part is an image or carries a cache marker. */
function content(c: unknown, where: string): string | Block[] {
  if (typeof c === 'string') return c;
  if (c == null) return '';
  if (!Array.isArray(c)) throw new UpstreamError(400, 'unsupported_content', `${where}: unsupported content.`);
  const blocks = (c as Part[]).map((p, j) => block(p, `${where}.content[${j}]`));
  if (blocks.every((b) => b.type === 'text' && b.cache_control === undefined)) return blocks.map((b) => b.text as string).join('\n');
  return blocks;
}

const asBlocks = (c: string | Block[]): Block[] => (typeof c === 'string' ? (c ? [{ type: 'text', text: c }] : []) : c);

function toolUseBlocks(calls: unknown, where: string): Block[] {
  if (!Array.isArray(calls)) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool_calls must be an array.`);
  return calls.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, j) => {
    let input: unknown = {};
    try {
      input = c.function?.arguments ? JSON.parse(String(c.function.arguments)) : {};
    } catch {
      throw new UpstreamError(400, 'invalid_tool_arguments', `${where}.tool_calls[${j}]: function.arguments is not valid JSON.`);
    }
    return { type: 'tool_use', id: validToolId(String(c.id ?? '')), name: String(c.function?.name ?? ''), input };
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
  const system: Array<string | Block[]> = [];
  const messages: AnthropicMessage[] = [];
  ((b.messages as Array<Record<string, unknown>>) ?? []).forEach((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'system' || m.role === 'developer') system.push(content(m.content, where));
    else if (m.role === 'user') messages.push({ role: 'user', content: content(m.content, where) });
    else if (m.role === 'assistant') {
      const said = content(m.content, where);
      if (!m.tool_calls) messages.push({ role: 'assistant', content: said });
      else messages.push({ role: 'assistant', content: [...asBlocks(said), ...toolUseBlocks(m.tool_calls, where)] });
    } else if (m.role === 'tool') {
      // tool results go back in a user turn; consecutive results share one
      const block = { type: 'tool_result', tool_use_id: validToolId(String(m.tool_call_id ?? '')), content: content(m.content, where) };
      const prev = messages[messages.length - 1];
      if (prev?.role === 'user' && Array.isArray(prev.content) && prev.content.every((x) => x.type === 'tool_result')) prev.content.push(block);
      else messages.push({ role: 'user', content: [block] });
    } else throw new UpstreamError(400, 'unsupported_parameter', `${where}: role "${String(m.role)}" is not supported for this model.`);
  });
  const out: Record<string, unknown> = { model: model.upstream_model, max_tokens: job.max_tokens, messages, stream: true };
  if (system.length) out.system = system.every((s) => typeof s === 'string') ? system.join('\n\n') : system.flatMap(asBlocks);
  if (b.tools !== undefined && b.tools !== null) out.tools = tools(b.tools);
  const choice = toolChoice(b.tool_choice);
  if (choice) out.tool_choice = choice;
  if (typeof b.temperature === 'number') out.temperature = Math.min(1, b.temperature); // Anthropic's range is 0–1
  if (typeof b.top_p === 'number') out.top_p = b.top_p;
  if (typeof b.top_k === 'number') out.top_k = b.top_k;
  if (typeof b.stop === 'string') out.stop_sequences = [b.stop];
  else if (Array.isArray(b.stop)) out.stop_sequences = b.stop;
  if (typeof b.user === 'string') out.metadata = { user_id: b.user };
  const budget = model.reasoning ? thinkingOf(b, job.max_tokens) : undefined;
  if (budget !== undefined) {
    // extended thinking: a budget within max_tokens (the hold's cap); Anthropic takes no sampling changes with it
    out.thinking = { type: 'enabled', budget_tokens: budget };
    delete out.temperature;
    delete out.top_k;
  }
  return out;
}

/** OpenRouter's `reasoning` (or OpenAI's reasoning_effort) as an Anthropic thinking budget, for a reasoning model. */
function thinkingOf(b: Record<string, unknown>, maxTokens: number): number | undefined {
  const r = b.reasoning && typeof b.reasoning === 'object' ? (b.reasoning as Reasoning) : null;
  if (r) return thinkingBudget(r, maxTokens);
  const effort = b.reasoning_effort;
  if (typeof effort === 'string' && (REASONING_EFFORTS as readonly string[]).includes(effort))
    return thinkingBudget({ effort: effort as Reasoning['effort'] }, maxTokens);
  return undefined;
}
