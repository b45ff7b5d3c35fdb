import { createHash } from 'node:crypto';
import { errors } from '../../errors.ts';
import { type CustomTool, type FunctionTool, HOSTED_TOOLS, type NamespaceTool, type Tool, type ToolChoice } from './schema.ts';

// Responses tools as chat-completion function tools, and the vendor's calls back:
//   function    as it is
//   custom      (free-form input, e.g. Codex's apply_patch) a function of one string argument,
//               `input`; its grammar, when it has one, goes into the description. The vendor's
//               call comes back as a custom_tool_call item with that string as `input`.
//   namespace   each tool inside becomes a function named <namespace>__<name> (longer than 64
//               characters: cut, with a hash of the whole, so that it stays unique); its calls
//               come back with `namespace` and `name` exactly as the client named them.
//   hosted      (web_search, file_search, …) run and billed per call by OpenAI: left out of what
//               the vendor is offered; a tool_choice that forces one is refused.
// The names map back through the table built from this request's tools, never by splitting.

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters: Record<string, unknown>; strict?: boolean };
}

/** A tool the vendor is offered, as the client named it. */
export interface ClientTool {
  name: string;
  namespace?: string;
  custom: boolean;
}

export interface ChatTools {
  tools: ChatTool[];
  /** chat tool_choice; undefined: not sent */
  choice?: unknown;
  /** chat name → the client's tool */
  byChatName: Map<string, ClientTool>;
}

const NAMESPACE_JOIN = '__';
const MAX_NAME = 64;

/** The chat name of a tool: its own name, or <namespace>__<name> cut to 64 characters with a hash. */
export function chatName(name: string, namespace?: string | null): string {
  if (!namespace) return name;
  const joined = namespace + NAMESPACE_JOIN + name;
  if (joined.length <= MAX_NAME) return joined;
  return `${joined.slice(0, MAX_NAME - 9)}_${createHash('sha256').update(joined).digest('hex').slice(0, 8)}`;
}

const CUSTOM_INPUT = 'input';

function customParameters(): Record<string, unknown> {
  return {
    type: 'object',
    properties: { [CUSTOM_INPUT]: { type: 'string', description: 'The raw input of the tool (free-form text).' } },
    required: [CUSTOM_INPUT],
    additionalProperties: false,
  };
}

function customDescription(t: CustomTool): string | undefined {
  const grammar = t.format?.type === 'grammar' && t.format.definition ? t.format : null;
  if (!grammar) return t.description ?? undefined;
  const intro = `The input must follow this ${grammar.syntax ?? ''} grammar:`.replace('  ', ' ');
  return `${t.description ? `${t.description}\n\n` : ''}${intro}\n${grammar.definition}`;
}

function chatTool(t: FunctionTool | CustomTool, name: string): ChatTool {
  if (t.type === 'custom') {
    const description = customDescription(t);
    return { type: 'function', function: { name, ...(description ? { description } : {}), parameters: customParameters() } };
  }
  const fn: ChatTool['function'] = { name, parameters: t.parameters ?? { type: 'object', properties: {} } };
  if (t.description) fn.description = t.description;
  if (typeof t.strict === 'boolean') fn.strict = t.strict;
  return { type: 'function', function: fn };
}

/** The custom tool's input from the vendor's arguments (`{"input": "…"}`); the raw arguments when they are not that. */
export function customInput(args: string): string {
  try {
    const v = JSON.parse(args) as Record<string, unknown>;
    if (v && typeof v[CUSTOM_INPUT] === 'string') return v[CUSTOM_INPUT] as string;
  } catch {
    // not JSON: the vendor wrote the input itself
  }
  return args;
}

/** A custom tool call's input as chat arguments. */
export const customArguments = (input: string) => JSON.stringify({ [CUSTOM_INPUT]: input });

/** The tools the vendor is offered, and the table that maps its calls back. */
function offered(tools: Tool[]): { list: ChatTool[]; byChatName: Map<string, ClientTool> } {
  const list: ChatTool[] = [];
  const byChatName = new Map<string, ClientTool>();
  const add = (t: FunctionTool | CustomTool, at: string, namespace?: string) => {
    const name = chatName(t.name, namespace);
    if (byChatName.has(name)) throw errors.badRequest(`Invalid value for '${at}': the tool name '${name}' is given twice.`, at);
    byChatName.set(name, { name: t.name, namespace, custom: t.type === 'custom' });
    list.push(chatTool(t, name));
  };
  tools.forEach((t, i) => {
    if (t.type === 'function' || t.type === 'custom') add(t as FunctionTool | CustomTool, `tools[${i}]`);
    else if (t.type === 'namespace') {
      const ns = t as NamespaceTool;
      for (const [j, inner] of ns.tools.entries()) add(inner, `tools[${i}].tools[${j}]`, ns.name);
    }
  });
  return { list, byChatName };
}

const forcedHosted = (type: string) =>
  errors.badRequest(
    `tool_choice forces the hosted tool '${type}', which this gateway cannot run or price: hosted tools are not offered to the model.`,
    'tool_choice',
    'unsupported_parameter',
  );

function namedChoice(byChatName: Map<string, ClientTool>, type: 'function' | 'custom', name: string | null | undefined): string {
  for (const [chat, t] of byChatName) if (t.name === name && t.custom === (type === 'custom') && !t.namespace) return chat;
  for (const [chat, t] of byChatName) if (chat === name && t.custom === (type === 'custom')) return chat;
  throw errors.badRequest(`Tool choice '${type}' named '${name ?? ''}' is not among the tools.`, 'tool_choice');
}

/** allowed_tools: only the listed tools are offered, and `mode` is the choice. */
function allowedTools(list: ChatTool[], byChatName: Map<string, ClientTool>, choice: Exclude<ToolChoice, string>) {
  const names = new Set<string>();
  for (const t of choice.tools ?? []) {
    if (HOSTED_TOOLS.has(t.type)) continue;
    if (t.type !== 'function' && t.type !== 'custom')
      throw errors.badRequest(`tool_choice.allowed_tools: tools of type '${t.type}' are not supported.`, 'tool_choice');
    names.add(namedChoice(byChatName, t.type, t.name));
  }
  const mode = choice.mode ?? 'auto';
  if (mode === 'required' && names.size === 0) throw forcedHosted(choice.tools?.[0]?.type ?? 'none');
  return { list: list.filter((t) => names.has(t.function.name)), choice: names.size ? mode : undefined };
}

/** The chat tools and tool_choice for a request's tools and tool_choice. */
export function chatTools(tools: Tool[], choice: ToolChoice | null | undefined): ChatTools {
  const { list, byChatName } = offered(tools);
  if (choice === undefined || choice === null || choice === 'auto' || choice === 'none') {
    return { tools: list, choice: list.length && choice ? choice : undefined, byChatName };
  }
  if (choice === 'required') {
    if (!list.length) throw forcedHosted(tools.find((t) => HOSTED_TOOLS.has(t.type))?.type ?? 'none');
    return { tools: list, choice, byChatName };
  }
  if (choice.type === 'function' || choice.type === 'custom') {
    const name = namedChoice(byChatName, choice.type, choice.name);
    return { tools: list, choice: { type: 'function', function: { name } }, byChatName };
  }
  if (choice.type === 'allowed_tools') {
    const allowed = allowedTools(list, byChatName, choice);
    return { tools: allowed.list, choice: allowed.choice, byChatName };
  }
  if (HOSTED_TOOLS.has(choice.type)) throw forcedHosted(choice.type);
  throw errors.badRequest(`Invalid value for 'tool_choice.type': '${choice.type}' is not supported.`, 'tool_choice.type');
}
