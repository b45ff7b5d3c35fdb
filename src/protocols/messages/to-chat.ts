import type { ParamRefusal } from '../../chat/params.ts';
import type { ModelRecord } from '../../db/models.ts';
import { isCustomTool } from './policy.ts';
import type { AnthropicBody, Block, Message, Tool } from './schema.ts';

// An Anthropic Messages request translated into chat completions, for a model whose adapter does
// not speak Messages (OpenAI-compatible vendors, the sim):
//   system (string or blocks), `system` turns      → system messages, in place
//   text / image blocks                             → content parts (a base64 image → a data: URL)
//   PDF documents (base64)                          → `file` parts; text documents → text parts
//   assistant tool_use blocks                       → tool_calls (input → JSON arguments)
//   user tool_result blocks                         → one `tool` message per result, in order,
//                                                     before the rest of that user turn
//   thinking / redacted_thinking blocks             → dropped (no chat equivalent)
//   tools (input_schema)                            → function tools; deferred tools dropped
//   tool_choice auto/any/tool/none                  → auto/required/{function}/none
//   stop_sequences → stop; temperature, top_p as they are; top_k dropped
//   metadata.user_id                                → user
//   thinking / output_config.effort                 → reasoning_effort (and max_completion_tokens),
//                                                     only for an OpenAI-compatible model the catalog
//                                                     marks as reasoning (others refuse the field)
//   cache_control (on blocks and at the top level)  → dropped (OpenAI caches prefixes by itself)

/** A translation that cannot be made: the 400 for it. */
export class Untranslatable extends Error {
  constructor(readonly refusal: ParamRefusal) {
    super(refusal.message);
  }
}

const untranslatable = (param: string, message: string, code: ParamRefusal['code'] = 'unsupported_content'): never => {
  throw new Untranslatable({ param, code, message: `${param}: ${message}` });
};

type ChatPart = Record<string, unknown>;
type ChatMessage = Record<string, unknown>;
type TranslationModel = Pick<ModelRecord, 'protocol' | 'reasoning'>;

function textOf(blocks: Block[]): string {
  let s = '';
  for (const b of blocks) if (b.type === 'text' && typeof b.text === 'string') s += (s ? '\n' : '') + b.text;
  return s;
}

function systemText(system: AnthropicBody['system']): string {
  if (system === undefined) return '';
  return typeof system === 'string' ? system : system.map((b) => b.text).join('\n\n');
}

function imagePart(b: Block, where: string): ChatPart {
  const source = (b.source ?? {}) as { type?: unknown; media_type?: unknown; data?: unknown; url?: unknown };
  if (source.type === 'base64') return { type: 'image_url', image_url: { url: `data:${String(source.media_type)};base64,${String(source.data)}` } };
  if (source.type === 'url') return { type: 'image_url', image_url: { url: String(source.url) } };
  return untranslatable(where, `image sources of type "${String(source.type)}" cannot be sent to this model.`);
}

function documentParts(b: Block, where: string): ChatPart[] {
  const source = (b.source ?? {}) as { type?: unknown; media_type?: unknown; data?: unknown; content?: unknown };
  if (source.type === 'text') return [{ type: 'text', text: String(source.data ?? '') }];
  if (source.type === 'content' && Array.isArray(source.content)) return [{ type: 'text', text: textOf(source.content as Block[]) }];
  if (source.type === 'base64' && source.media_type === 'application/pdf') {
    const filename = typeof b.title === 'string' && b.title ? b.title : 'document.pdf';
    return [{ type: 'file', file: { filename, file_data: `data:application/pdf;base64,${String(source.data)}` } }];
  }
  return untranslatable(where, `documents with a source of type "${String(source.type)}" can only be sent to Anthropic models.`);
}

/** A user turn's blocks (not tool results) as chat content parts. */
function userParts(b: Block, where: string): ChatPart[] {
  switch (b.type) {
    case 'text':
      return [{ type: 'text', text: String(b.text ?? '') }];
    case 'image':
      return [imagePart(b, where)];
    case 'document':
      return documentParts(b, where);
    case 'search_result':
      return [{ type: 'text', text: textOf((b.content as Block[] | undefined) ?? []) }];
    case 'thinking':
    case 'redacted_thinking':
      return [];
    default:
      return untranslatable(where, `Content blocks of type "${b.type}" cannot be sent to this model.`);
  }
}

const partsContent = (parts: ChatPart[]): unknown => (parts.length === 1 && parts[0].type === 'text' ? parts[0].text : parts);

/** A user turn: its tool results as `tool` messages first (they answer the turn before), then the rest. */
function userMessages(blocks: Block[], where: string): ChatMessage[] {
  const out: ChatMessage[] = [];
  const parts: ChatPart[] = [];
  blocks.forEach((b, j) => {
    if (b.type !== 'tool_result') {
      parts.push(...userParts(b, `${where}.content.${j}`));
      return;
    }
    let text = '';
    if (typeof b.content === 'string') text = b.content;
    else if (Array.isArray(b.content)) {
      (b.content as Block[]).forEach((c, k) => {
        if (c.type === 'text') text += (text ? '\n' : '') + String(c.text ?? '');
        else parts.push(...userParts(c, `${where}.content.${j}.content.${k}`)); // images of a result follow as user content
      });
    }
    out.push({ role: 'tool', tool_call_id: String(b.tool_use_id ?? ''), content: b.is_error === true ? `Error: ${text}` : text });
  });
  if (parts.length) out.push({ role: 'user', content: partsContent(parts) });
  return out;
}

function assistantMessage(blocks: Block[]): ChatMessage | null {
  const text = textOf(blocks);
  const calls = blocks
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ id: String(b.id ?? ''), type: 'function', function: { name: String(b.name ?? ''), arguments: JSON.stringify(b.input ?? {}) } }));
  if (!text && calls.length === 0) return null; // only thinking: nothing a chat model can be shown
  return calls.length ? { role: 'assistant', content: text || null, tool_calls: calls } : { role: 'assistant', content: text };
}

/** Anthropic's rule, checked before a vendor that would word it differently: each tool_use answered by one tool_result in the next turn. */
function checkToolResults(messages: Message[]): void {
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    const results = m.role === 'user' && Array.isArray(m.content) ? m.content.filter((b) => b.type === 'tool_result').map((b) => String(b.tool_use_id)) : [];
    const prev = messages[i - 1];
    const uses = prev?.role === 'assistant' && Array.isArray(prev.content) ? prev.content.filter((b) => b.type === 'tool_use').map((b) => String(b.id)) : [];
    const unanswered = uses.filter((id) => !results.includes(id));
    if (unanswered.length)
      untranslatable(
        `messages.${i}`,
        `\`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${unanswered.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
        'unsupported_parameter',
      );
    const unexpected = results.filter((id, k) => !uses.includes(id) || results.indexOf(id) !== k);
    if (unexpected.length)
      untranslatable(
        `messages.${i}.content`,
        `unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${unexpected.join(', ')}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
        'unsupported_parameter',
      );
  }
}

function chatMessages(body: AnthropicBody): ChatMessage[] {
  checkToolResults(body.messages);
  const out: ChatMessage[] = [];
  const system = systemText(body.system);
  if (system) out.push({ role: 'system', content: system });
  body.messages.forEach((m, i) => {
    if (typeof m.content === 'string') out.push({ role: m.role, content: m.content });
    else if (m.role === 'system') out.push({ role: 'system', content: textOf(m.content) });
    else if (m.role === 'user') out.push(...userMessages(m.content, `messages.${i}`));
    else {
      const a = assistantMessage(m.content);
      if (a) out.push(a);
    }
  });
  return out;
}

function chatTools(tools: Tool[]): ChatPart[] {
  const out: ChatPart[] = [];
  tools.forEach((t, i) => {
    if (!isCustomTool(t))
      untranslatable(`tools.${i}.type`, `Anthropic-defined tools ("${String(t.type)}") can only be sent to Anthropic models.`, 'unsupported_parameter');
    if (t.defer_loading === true) return; // not in the model's context until a tool search loads it
    const fn: Record<string, unknown> = { name: t.name, parameters: t.input_schema ?? { type: 'object', properties: {} } };
    if (typeof t.description === 'string') fn.description = t.description;
    if (typeof t.strict === 'boolean') fn.strict = t.strict;
    out.push({ type: 'function', function: fn });
  });
  return out;
}

function chatToolChoice(choice: NonNullable<AnthropicBody['tool_choice']>): unknown {
  if (choice.type === 'any') return 'required';
  if (choice.type === 'tool') return { type: 'function', function: { name: String(choice.name ?? '') } };
  return choice.type; // auto, none
}

const EFFORTS: Record<string, string> = { low: 'low', medium: 'medium', high: 'high', max: 'high', xhigh: 'high' };

/** The reasoning effort an Anthropic request asks for: output_config.effort, else the thinking budget. */
function reasoningEffort(body: AnthropicBody): string | undefined {
  const effort = (body.output_config as { effort?: unknown } | undefined)?.effort;
  if (typeof effort === 'string' && EFFORTS[effort]) return EFFORTS[effort];
  const thinking = body.thinking;
  if (!thinking || thinking.type === 'disabled') return undefined;
  if (thinking.type === 'adaptive') return 'medium';
  const budget = thinking.budget_tokens as number;
  return budget < 4096 ? 'low' : budget < 16384 ? 'medium' : 'high';
}

/** The chat-completions body for `body` on `model` (throws Untranslatable with the 400). */
export function toChat(body: AnthropicBody, model: TranslationModel, opts: { maxTokens?: number; stream: boolean }): Record<string, unknown> {
  const out: Record<string, unknown> = { messages: chatMessages(body), stream: opts.stream };
  const reasoning = model.reasoning && model.protocol === 'openai';
  if (opts.maxTokens !== undefined) out[reasoning ? 'max_completion_tokens' : 'max_tokens'] = opts.maxTokens;
  const tools = body.tools ? chatTools(body.tools) : [];
  if (tools.length) {
    out.tools = tools;
    if (body.tool_choice) out.tool_choice = chatToolChoice(body.tool_choice);
    if (body.tool_choice?.disable_parallel_tool_use === true && model.protocol === 'openai') out.parallel_tool_calls = false;
  }
  const stop = body.stop_sequences as string[] | undefined;
  if (stop?.length) {
    if (stop.length > 4 && model.protocol === 'openai')
      untranslatable('stop_sequences', 'at most 4 stop sequences can be sent to this model.', 'unsupported_parameter');
    out.stop = stop;
  }
  if (typeof body.temperature === 'number') out.temperature = body.temperature;
  if (typeof body.top_p === 'number') out.top_p = body.top_p;
  const user = (body.metadata as { user_id?: unknown } | undefined)?.user_id;
  if (typeof user === 'string') out.user = user;
  const effort = reasoning ? reasoningEffort(body) : undefined;
  if (effort) out.reasoning_effort = effort;
  if (model.protocol === 'sim' && body.sim !== undefined) out.sim = body.sim;
  return out;
}
