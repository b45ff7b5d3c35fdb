import { errors } from '../../errors.ts';
import { inputItemId } from './ids.ts';
import type { InputItem, MessageItem } from './schema.ts';
import { chatName, customArguments } from './tools.ts';

// Responses items → chat-completion messages, for every vendor (none has a Responses adapter):
//   message                    its role (user, system, assistant; developer as system); input_text
//                              and output_text parts → text, input_image → image_url, input_file → file
//   function_call,             an assistant message's tool_calls (consecutive calls share one, with
//   custom_tool_call           the assistant text before them); a custom call's input as {"input"}
//   function_call_output,      a tool message, placed right after the assistant message holding the
//   custom_tool_call_output    call with the same call_id (a call without an output, or an output
//                              without a call, is a 400 as OpenAI answers)
//   reasoning                  dropped: its encrypted content is the vendor's own and cannot be
//                              replayed to a chat vendor (its summary is not the reasoning either)
//   item_reference             the item with that id, from the previous response's conversation
//                              or earlier in this input
// `origins[i]` says where message i came from (`input[3]`, `instructions`, `previous_response_id`),
// so a refusal of the chat policy can name the client's field.

export type Item = InputItem & { id?: string | null };

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content: string | null | Array<Record<string, unknown>>;
  tool_calls?: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

export interface ChatConversation {
  messages: ChatMessage[];
  origins: string[];
}

type Part = { type: string } & Record<string, unknown>;

function unsupported(at: string, why: string): never {
  throw errors.badRequest(`Invalid value for '${at}': ${why}`, at, 'unsupported_content');
}

function textOf(p: Part, at: string): string {
  if (p.type === 'refusal') return typeof p.refusal === 'string' ? p.refusal : '';
  if (typeof p.text !== 'string') unsupported(at, 'a text part needs its text.');
  return p.text as string;
}

/** A user, system or developer part as a chat content part. */
function chatPart(p: Part, at: string): Record<string, unknown> {
  switch (p.type) {
    case 'input_text':
    case 'output_text':
      return { type: 'text', text: textOf(p, at) };
    case 'input_image':
      if (typeof p.image_url !== 'string') unsupported(at, 'images must be sent inline (image_url); file ids of the vendor are not available.');
      return { type: 'image_url', image_url: { url: p.image_url, ...(typeof p.detail === 'string' ? { detail: p.detail } : {}) } };
    case 'input_file':
      if (typeof p.file_data !== 'string') unsupported(at, 'files must be sent inline (file_data); file ids and URLs of the vendor are not available.');
      return { type: 'file', file: { file_data: p.file_data, ...(typeof p.filename === 'string' ? { filename: p.filename } : {}) } };
    default:
      return unsupported(at, `content parts of type '${p.type}' are not supported.`);
  }
}

/** A message's content: text parts only → one string (joined by newlines); otherwise chat parts. */
function messageContent(m: MessageItem, at: string): ChatMessage['content'] {
  if (typeof m.content === 'string') return m.content;
  const parts = m.content as Part[];
  if (m.role === 'assistant') return parts.map((p, j) => textOf(p, `${at}.content[${j}]`)).join('');
  const isText = (p: Part) => p.type === 'input_text' || p.type === 'output_text';
  if (parts.every(isText)) return parts.map((p, j) => textOf(p, `${at}.content[${j}]`)).join('\n');
  return parts.map((p, j) => chatPart(p, `${at}.content[${j}]`));
}

/** A tool's output as the text of a tool message. */
function outputText(output: string | Part[], at: string): string {
  if (typeof output === 'string') return output;
  return output
    .map((p, j) => {
      if (p.type === 'input_text' || p.type === 'output_text') return textOf(p, `${at}.output[${j}]`);
      return unsupported(`${at}.output[${j}]`, 'a tool output can only hold text for this gateway.');
    })
    .join('\n');
}

type Located = { item: Item; at: string };

/** item_reference resolved against the items before it (the previous conversation's and this input's). */
function resolveReferences(items: Located[]): Located[] {
  const byId = new Map<string, Item>();
  return items.map(({ item, at }) => {
    let resolved = item;
    if (item.type === 'item_reference') {
      const found = byId.get(item.id);
      if (!found) throw errors.badRequest(`Invalid value for '${at}': no item with id '${item.id}' in this conversation.`, `${at}.id`);
      resolved = found;
    }
    if (resolved.id) byId.set(resolved.id, resolved);
    return { item: resolved, at };
  });
}

interface Call {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** The conversation as chat messages: tool outputs moved right after their calls' assistant message. */
export function chatMessages(items: Located[], instructions?: string | null): ChatConversation {
  const located = resolveReferences(items);
  const outputs = new Map<string, Located>();
  for (const l of located) {
    if (l.item.type !== 'function_call_output' && l.item.type !== 'custom_tool_call_output') continue;
    outputs.set(l.item.call_id, l);
  }
  const messages: ChatMessage[] = [];
  const origins: string[] = [];
  const push = (m: ChatMessage, at: string) => {
    messages.push(m);
    origins.push(at);
  };
  if (instructions) push({ role: 'system', content: instructions }, 'instructions');
  let open: { message: ChatMessage; at: string } | null = null; // the assistant message calls join
  const used = new Set<string>();
  const closeCalls = () => {
    if (!open) return;
    for (const call of open.message.tool_calls ?? []) {
      const out = outputs.get(call.id);
      if (!out) throw errors.badRequest(`No tool output found for function call ${call.id}.`, open.at);
      used.add(call.id);
      const o = out.item as { output: string | Part[] };
      push({ role: 'tool', tool_call_id: call.id, content: outputText(o.output, out.at) }, out.at);
    }
    open = null;
  };
  for (const { item, at } of located) {
    switch (item.type) {
      case 'message': {
        closeCalls();
        // developer as system: OpenAI treats them alike, and other chat vendors know only system
        const m: ChatMessage = { role: item.role === 'developer' ? 'system' : item.role, content: messageContent(item, at) };
        push(m, at);
        if (item.role === 'assistant') open = { message: m, at };
        break;
      }
      case 'function_call':
      case 'custom_tool_call': {
        const call: Call = {
          id: item.call_id,
          type: 'function',
          function: {
            name: chatName(item.name, item.namespace),
            arguments: item.type === 'function_call' ? item.arguments : customArguments(item.input),
          },
        };
        if (open && !open.message.tool_calls?.length && open.message.content === '') open.message.content = null;
        if (!open) {
          open = { message: { role: 'assistant', content: null }, at };
          push(open.message, at);
        }
        (open.message.tool_calls ??= []).push(call);
        break;
      }
      case 'function_call_output':
      case 'custom_tool_call_output':
        closeCalls(); // the outputs of the calls before it follow them; a call after it starts a new assistant message
        if (!used.has(item.call_id)) throw errors.badRequest(`No tool call found for function call output with call_id ${item.call_id}.`, at);
        break;
      default: // reasoning: not replayable to a chat vendor
        break;
    }
  }
  closeCalls();
  if (!messages.some((m) => m.role !== 'system')) throw errors.badRequest("Invalid value for 'input': the conversation has no message.", 'input');
  return { messages, origins };
}

/**
 * This request's items as they are stored and listed: every item with an id (ours where the
 * client gave none), a message's string content as one text part, references resolved.
 */
export function storedItems(items: Item[], base: string, prior: Item[]): Item[] {
  const byId = new Map<string, Item>();
  for (const p of prior) if (p.id) byId.set(p.id, p);
  return items.map((item, i) => {
    if (item.type === 'item_reference') return byId.get(item.id) ?? item;
    const out: Item = { ...item, id: item.id ?? inputItemId(base, item.type, i) };
    if (out.type === 'message' && typeof out.content === 'string') {
      out.content = [{ type: out.role === 'assistant' ? 'output_text' : 'input_text', text: out.content }];
    }
    if (out.id) byId.set(out.id, out);
    return out;
  });
}
