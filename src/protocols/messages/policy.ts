import type { ModelRecord } from '../../db/models.ts';
import { type CatracaError, errors } from '../../errors.ts';
import type { ParamRefusal } from '../../chat/params.ts';
import type { AnthropicBody, Block, Message, Tool } from './schema.ts';
import { validToolId } from './tool-ids.ts';

// Which parts of an Anthropic Messages request reach a vendor. A client's body is never forwarded
// as it came: every top-level field, content block, tool and beta is in one of these lists.
//
//   handled   model, messages, max_tokens, stream: the gateway sets them itself
//   forward   Anthropic's documented fields that cost nothing beyond tokens (FORWARDED)
//   refuse    fields whose use the vendor bills beyond tokens (code-execution containers, MCP
//             servers, server tools like web search) or that we cannot check: 400 naming them
//   drop      anything else (fields of newer API versions, other dialects): accepted, never sent

/**
 * Top-level fields sent to an Anthropic-protocol vendor, besides model, messages, max_tokens and
 * stream. A top-level `cache_control` (automatic prompt caching) goes to Anthropic vendors only:
 * the chat translation drops it (OpenAI-compatible vendors cache prefixes by themselves).
 */
export const FORWARDED = [
  'system',
  'cache_control',
  'metadata',
  'stop_sequences',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
  'context_management',
  'output_config',
  'output_format',
] as const;

/** What /v1/messages/count_tokens sends to Anthropic's count endpoint. */
export const COUNT_FORWARDED = ['system', 'cache_control', 'tools', 'tool_choice', 'thinking', 'context_management', 'output_config', 'output_format'] as const;

// anthropic-beta values sent on: features priced as tokens. Anything else (the 1M-token context,
// billed at premium rates above 200k; files, code execution, MCP, skills, …) is not sent.
const BETAS = new Set([
  'claude-code-20250219',
  'interleaved-thinking-2025-05-14',
  'context-management-2025-06-27',
  'fine-grained-tool-streaming-2025-05-14',
  'effort-2025-11-24',
  'advanced-tool-use-2025-11-20',
  'token-efficient-tools-2025-02-19',
  'output-128k-2025-02-19',
  'prompt-caching-2024-07-31',
  'extended-cache-ttl-2025-04-11',
  'structured-outputs-2025-11-13',
  'mid-conversation-tool-changes-2026-07-01',
  'thinking-token-count-2026-05-13',
  'token-counting-2024-11-01',
  'pdfs-2024-09-25',
  'tool-examples-2025-10-29',
  'computer-use-2025-01-24',
  'computer-use-2025-11-24',
]);

/** The client's anthropic-beta list, kept to the values we forward (unknown ones never break a request). */
export function forwardedBetas(header: string): string[] {
  if (!header) return [];
  const out: string[] = [];
  for (const raw of header.split(',')) {
    const b = raw.trim();
    if (BETAS.has(b) && !out.includes(b)) out.push(b);
  }
  return out;
}

const FIRST_VERSION = '2023-06-01';

/** anthropic-version: absent (Anthropic's first version applies), or a date from 2023-06-01 on; otherwise a 400. */
export function checkVersion(header: string): CatracaError | null {
  if (!header) return null;
  const ok = /^\d{4}-\d{2}-\d{2}$/.test(header) && !Number.isNaN(Date.parse(`${header}T00:00:00Z`)) && header >= FIRST_VERSION;
  return ok
    ? null
    : errors.badRequest(`anthropic-version: "${header.slice(0, 40)}" is not a valid version (a date from ${FIRST_VERSION} on).`, 'anthropic-version');
}

const SERVER_TOOL = /^(web_search|web_fetch|code_execution|tool_search_tool|mcp_toolset|memory_search)/;
/** Tools Anthropic defines that run on the client: billed as tokens (their schema is Anthropic's). */
const CLIENT_TOOL = /^(bash|text_editor|computer|memory)_\d+$/;
const CUSTOM_TOOL_FIELDS = ['name', 'description', 'input_schema', 'cache_control', 'type', 'defer_loading', 'strict', 'input_examples'];

export const isCustomTool = (t: Tool) => t.type === undefined || t.type === 'custom';

const refuse = (param: string, message: string, code: ParamRefusal['code'] = 'unsupported_parameter'): ParamRefusal => ({
  param,
  code,
  message: `${param}: ${message}`,
});

function pick(o: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) if (o[f] !== undefined) out[f] = o[f];
  return out;
}

/** Anthropic's limit of cache breakpoints in one request (a top-level `cache_control` takes one slot). */
export const MAX_CACHE_BREAKPOINTS = 4;

/** A block's own marker and those of the blocks it carries (tool_result and search_result content), as forwarded. */
function blockBreakpoints(b: Block): number {
  if (b === null || typeof b !== 'object') return 0;
  let n = b.cache_control != null && BLOCK_FIELDS[b.type]?.includes('cache_control') ? 1 : 0;
  if ((b.type === 'tool_result' || b.type === 'search_result') && Array.isArray(b.content)) for (const c of b.content as Block[]) n += blockBreakpoints(c);
  return n;
}

/** The cache_control markers Anthropic counts against its limit: top level, system blocks, tools and content blocks. */
export function cacheBreakpoints(body: AnthropicBody): number {
  let n = body.cache_control != null ? 1 : 0;
  if (Array.isArray(body.system)) for (const b of body.system) if (b?.cache_control != null) n++;
  for (const t of body.tools ?? []) if (t?.cache_control != null) n++;
  for (const m of body.messages) if (Array.isArray(m.content)) for (const b of m.content) n += blockBreakpoints(b);
  return n;
}

/** Fields whose use the vendor bills beyond tokens, or that we cannot check. */
export function checkTopLevel(body: AnthropicBody): ParamRefusal | null {
  const breakpoints = cacheBreakpoints(body);
  if (breakpoints > MAX_CACHE_BREAKPOINTS)
    return refuse(
      'cache_control',
      `A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided (a top-level cache_control counts as one). Found ${breakpoints}.`,
    );
  if (body.container != null)
    return refuse('container', 'code-execution containers are billed by the vendor per use and are not available through this gateway.');
  if (body.mcp_servers != null && !(Array.isArray(body.mcp_servers) && body.mcp_servers.length === 0))
    return refuse('mcp_servers', 'remote MCP servers are not available through this gateway.');
  const tier = body.service_tier;
  if (tier != null && tier !== 'auto' && tier !== 'standard_only')
    return refuse('service_tier', "only 'auto' or 'standard_only' is available through this gateway: other tiers are priced differently.");
  const edits = (body.context_management as { edits?: unknown } | undefined)?.edits;
  if (Array.isArray(edits)) {
    for (let i = 0; i < edits.length; i++) {
      const type = String((edits[i] as { type?: unknown } | null)?.type);
      if (!/^clear_(thinking|tool_uses)_\d+$/.test(type))
        return refuse(`context_management.edits.${i}.type`, `"${type}" is not available through this gateway (only clear_thinking and clear_tool_uses edits).`);
    }
  }
  for (let i = 0; i < (body.tools?.length ?? 0); i++) {
    const t = body.tools![i] as Tool;
    if (isCustomTool(t) || CLIENT_TOOL.test(String(t.type))) continue;
    const why = SERVER_TOOL.test(String(t.type))
      ? 'server tools are billed by the vendor per use and are not available through this gateway.'
      : 'unknown tool type.';
    return refuse(`tools.${i}.type`, `"${String(t.type)}": ${why}`);
  }
  return null;
}

type Modalities = Pick<ModelRecord, 'input_modalities'>;

/** Images and documents against the catalog's modalities; file ids and server-tool results refused. */
function checkBlock(b: Block, where: string, model: Modalities): ParamRefusal | null {
  const source = b.source as { type?: unknown } | undefined;
  switch (b.type) {
    case 'text':
    case 'tool_use':
    case 'thinking':
    case 'redacted_thinking':
    case 'search_result':
      return null;
    case 'image':
    case 'document': {
      const modality = b.type === 'image' ? 'image' : 'file';
      if (!model.input_modalities.includes(modality))
        return refuse(where, `This model does not accept ${b.type === 'image' ? 'image' : 'document'} input.`, 'unsupported_content');
      if (source?.type === 'file')
        return refuse(where, "Send the file inline (base64 or url): the vendor's file ids are not available.", 'unsupported_content');
      return null;
    }
    case 'tool_result': {
      if (!Array.isArray(b.content)) return null;
      for (let k = 0; k < b.content.length; k++) {
        const refused = checkBlock(b.content[k] as Block, `${where}.content.${k}`, model);
        if (refused) return refused;
      }
      return null;
    }
    default:
      return refuse(where, `Content blocks of type "${String(b.type)}" are not supported.`, 'unsupported_content');
  }
}

export function checkBlocks(body: AnthropicBody, model: Modalities): ParamRefusal | null {
  for (let i = 0; i < body.messages.length; i++) {
    const content = body.messages[i].content;
    if (typeof content === 'string') continue;
    for (let j = 0; j < content.length; j++) {
      const refused = checkBlock(content[j], `messages.${i}.content.${j}`, model);
      if (refused) return refused;
    }
  }
  return null;
}

const BLOCK_FIELDS: Record<string, readonly string[]> = {
  text: ['type', 'text', 'cache_control', 'citations'],
  image: ['type', 'source', 'cache_control'],
  document: ['type', 'source', 'title', 'context', 'citations', 'cache_control'],
  search_result: ['type', 'source', 'title', 'content', 'citations', 'cache_control'],
  tool_use: ['type', 'id', 'name', 'input', 'cache_control'],
  tool_result: ['type', 'tool_use_id', 'content', 'is_error', 'cache_control'],
  thinking: ['type', 'thinking', 'signature'],
  redacted_thinking: ['type', 'data'],
};

/** A content block as an Anthropic vendor may see it: its documented fields, tool ids made valid. */
function vendorBlock(b: Block): Block {
  const out = pick(b, BLOCK_FIELDS[b.type] ?? ['type']) as Block;
  if (b.type === 'tool_use') out.id = validToolId(String(b.id ?? ''));
  if (b.type === 'tool_result') {
    out.tool_use_id = validToolId(String(b.tool_use_id ?? ''));
    if (Array.isArray(b.content)) out.content = (b.content as Block[]).map(vendorBlock);
  }
  return out;
}

/**
 * Thinking blocks go back to Anthropic only with the signature Anthropic gave them: an unsigned
 * one (reasoning another vendor produced, shown to the client as thinking) is refused by the
 * vendor ("Invalid signature"), so it is dropped, and a turn left empty with it.
 */
const unsigned = (b: Block) => b.type === 'thinking' && (typeof b.signature !== 'string' || b.signature === '');

export function vendorMessages(messages: Message[]): Message[] {
  const out: Message[] = [];
  for (const m of messages) {
    if (typeof m.content === 'string') {
      out.push({ role: m.role, content: m.content });
      continue;
    }
    const content = m.content.filter((b) => !unsigned(b)).map(vendorBlock);
    if (content.length > 0 || m.content.length === 0) out.push({ role: m.role, content });
  }
  return out;
}

function vendorTool(t: Tool): Record<string, unknown> {
  return isCustomTool(t) ? pick(t, CUSTOM_TOOL_FIELDS) : { ...t };
}

/** The fields of `body` in `fields`, each in the shape Anthropic documents (defense in depth, also applied by the worker). */
export function vendorFields(body: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    const v = body[f];
    if (v === undefined || v === null) continue;
    switch (f) {
      case 'metadata': {
        const user = (v as { user_id?: unknown }).user_id;
        if (typeof user === 'string') out.metadata = { user_id: user };
        break;
      }
      case 'tools':
        out.tools = (v as Tool[]).map(vendorTool);
        break;
      case 'tool_choice':
        out.tool_choice = pick(v as Record<string, unknown>, ['type', 'name', 'disable_parallel_tool_use']);
        break;
      case 'thinking':
        out.thinking = pick(v as Record<string, unknown>, ['type', 'budget_tokens', 'display']);
        break;
      case 'output_config':
        out.output_config = pick(v as Record<string, unknown>, ['effort', 'format']);
        break;
      case 'cache_control':
        out.cache_control = pick(v as Record<string, unknown>, ['type', 'ttl']);
        break;
      case 'system':
        out.system = typeof v === 'string' ? v : (v as Block[]).map((b) => pick(b, ['type', 'text', 'cache_control', 'citations']));
        break;
      default:
        out[f] = v;
    }
  }
  return out;
}
