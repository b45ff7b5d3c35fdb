import { z } from 'zod';
import { errors } from '../../errors.ts';
import { describeIssue } from '../request-body.ts';

// What POST /v1/responses reads, checked before anything is charged. Top-level fields outside
// OpenAI's documented list (plus Codex's client_metadata and our `sim`) are refused with OpenAI's
// own answer; items and tools are checked one by one so a refusal names `input[i]` / `tools[i]`.

/** Every top-level field the route knows: read, accepted and ignored, or refused with a reason. */
const KNOWN_FIELDS = new Set([
  'model',
  'input',
  'instructions',
  'stream',
  'stream_options',
  'store',
  'previous_response_id',
  'include',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'max_output_tokens',
  'max_tool_calls',
  'temperature',
  'top_p',
  'text',
  'reasoning',
  'metadata',
  'user',
  'safety_identifier',
  'prompt_cache_key',
  'client_metadata',
  'service_tier',
  'truncation',
  'top_logprobs',
  'background',
  'conversation',
  'prompt',
  'prompt_cache_retention',
  'sim',
]);

/** Documented fields we cannot serve: the 400's reason when they are set. */
const REFUSED: Record<string, (v: unknown) => string | null> = {
  background: (v) => (v === true ? 'Background responses are not available through this gateway; stream instead.' : null),
  conversation: (v) => (v == null ? null : 'Conversation objects are not available through this gateway; use previous_response_id.'),
  prompt: (v) => (v == null ? null : 'Reusable prompt templates are not available through this gateway; send input and instructions.'),
  prompt_cache_retention: (v) => (v == null ? null : 'prompt_cache_retention is not available through this gateway.'),
  top_logprobs: (v) => (typeof v === 'number' && v > 0 ? 'logprobs are not relayed by this gateway.' : null),
  truncation: (v) =>
    v === 'auto' ? "Only truncation 'disabled' is available: this gateway does not drop items from a conversation that outgrows the context." : null,
};

const nullish = <T extends z.ZodType>(t: T) => t.nullish();

const FunctionToolSchema = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1),
  description: nullish(z.string()),
  parameters: nullish(z.record(z.string(), z.unknown())),
  strict: nullish(z.boolean()),
});

const CustomToolSchema = z.looseObject({
  type: z.literal('custom'),
  name: z.string().min(1),
  description: nullish(z.string()),
  format: nullish(
    z.looseObject({
      type: z.enum(['text', 'grammar']),
      syntax: nullish(z.string()),
      definition: nullish(z.string()),
    }),
  ),
});

const NamespaceToolSchema = z.looseObject({
  type: z.literal('namespace'),
  name: z.string().min(1),
  description: nullish(z.string()),
  tools: z.array(z.discriminatedUnion('type', [FunctionToolSchema, CustomToolSchema])),
});

export type FunctionTool = z.infer<typeof FunctionToolSchema>;
export type CustomTool = z.infer<typeof CustomToolSchema>;
export type NamespaceTool = z.infer<typeof NamespaceToolSchema>;
/** A hosted tool, as the client sent it (never offered to the vendor). */
export type HostedTool = { type: string } & Record<string, unknown>;
export type Tool = FunctionTool | CustomTool | NamespaceTool | HostedTool;

/**
 * OpenAI's hosted tools: run (and billed per call) by OpenAI, which no chat vendor can run and we
 * cannot price. Left out of what the vendor is offered; a tool_choice forcing one is refused.
 */
export const HOSTED_TOOLS = new Set([
  'web_search',
  'web_search_2025_08_26',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'file_search',
  'code_interpreter',
  'computer',
  'computer_use',
  'computer_use_preview',
  'image_generation',
  'mcp',
  'local_shell',
  'shell',
  'apply_patch',
  'tool_search',
  'programmatic_tool_calling',
]);

const Part = z.looseObject({ type: z.string() });

const MessageItemSchema = z.looseObject({
  type: z.literal('message'),
  id: nullish(z.string()),
  role: z.enum(['user', 'system', 'developer', 'assistant']),
  content: z.union([z.string(), z.array(Part)]),
});
const FunctionCallSchema = z.looseObject({
  type: z.literal('function_call'),
  id: nullish(z.string()),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: nullish(z.string()),
  arguments: z.string(),
});
const ToolOutput = z.union([z.string(), z.array(Part)]);
const FunctionCallOutputSchema = z.looseObject({
  type: z.literal('function_call_output'),
  id: nullish(z.string()),
  call_id: z.string().min(1),
  output: ToolOutput,
});
const CustomToolCallSchema = z.looseObject({
  type: z.literal('custom_tool_call'),
  id: nullish(z.string()),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: nullish(z.string()),
  input: z.string(),
});
const CustomToolCallOutputSchema = z.looseObject({
  type: z.literal('custom_tool_call_output'),
  id: nullish(z.string()),
  call_id: z.string().min(1),
  output: ToolOutput,
});
const ReasoningItemSchema = z.looseObject({ type: z.literal('reasoning'), id: nullish(z.string()) });
const ItemReferenceSchema = z.looseObject({ type: z.literal('item_reference'), id: z.string().min(1) });

const ITEM_SCHEMAS = {
  message: MessageItemSchema,
  function_call: FunctionCallSchema,
  function_call_output: FunctionCallOutputSchema,
  custom_tool_call: CustomToolCallSchema,
  custom_tool_call_output: CustomToolCallOutputSchema,
  reasoning: ReasoningItemSchema,
  item_reference: ItemReferenceSchema,
} as const;

export type MessageItem = z.infer<typeof MessageItemSchema>;
export type FunctionCallItem = z.infer<typeof FunctionCallSchema>;
export type FunctionCallOutputItem = z.infer<typeof FunctionCallOutputSchema>;
export type CustomToolCallItem = z.infer<typeof CustomToolCallSchema>;
export type CustomToolCallOutputItem = z.infer<typeof CustomToolCallOutputSchema>;
export type ReasoningItem = z.infer<typeof ReasoningItemSchema>;
export type ItemReference = z.infer<typeof ItemReferenceSchema>;
export type InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | CustomToolCallItem | CustomToolCallOutputItem | ReasoningItem | ItemReference;

const ToolChoiceSchema = z.union([
  z.enum(['auto', 'none', 'required']),
  z.looseObject({
    type: z.string(),
    name: nullish(z.string()),
    mode: nullish(z.enum(['auto', 'required'])),
    tools: nullish(z.array(z.looseObject({ type: z.string(), name: nullish(z.string()) }))),
  }),
]);
export type ToolChoice = z.infer<typeof ToolChoiceSchema>;

const TextFormatSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().min(1),
    schema: z.record(z.string(), z.unknown()),
    description: nullish(z.string()),
    strict: nullish(z.boolean()),
  }),
]);

export const ResponsesRequestSchema = z.object({
  model: z.string().min(1, 'model is required'),
  input: z.union([z.string(), z.array(z.unknown())]).optional(),
  instructions: nullish(z.string()),
  stream: nullish(z.boolean()),
  stream_options: nullish(z.looseObject({})),
  store: nullish(z.boolean()),
  previous_response_id: nullish(z.string().min(1).max(200)),
  include: nullish(z.array(z.string())),
  tools: nullish(z.array(z.looseObject({ type: z.string() }))),
  tool_choice: nullish(ToolChoiceSchema),
  parallel_tool_calls: nullish(z.boolean()),
  max_output_tokens: nullish(z.number().int().positive()),
  max_tool_calls: nullish(z.number().int().nonnegative()),
  temperature: nullish(z.number().min(0).max(2)),
  top_p: nullish(z.number().min(0).max(1)),
  text: nullish(z.looseObject({ format: nullish(TextFormatSchema), verbosity: nullish(z.enum(['low', 'medium', 'high'])) })),
  reasoning: nullish(
    z.looseObject({
      effort: nullish(z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh'])),
      summary: nullish(z.enum(['auto', 'concise', 'detailed'])),
    }),
  ),
  metadata: nullish(z.record(z.string().max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 16, 'at most 16 keys')),
  user: nullish(z.string()),
  safety_identifier: nullish(z.string()),
  prompt_cache_key: nullish(z.string()),
  client_metadata: nullish(z.record(z.string(), z.unknown())),
  service_tier: nullish(z.string()),
  truncation: nullish(z.enum(['auto', 'disabled'])),
  top_logprobs: nullish(z.number().int().min(0).max(20)),
  background: nullish(z.boolean()),
  conversation: z.unknown().optional(),
  prompt: z.unknown().optional(),
  prompt_cache_retention: z.unknown().optional(),
  sim: nullish(z.looseObject({})),
});

export type ResponsesRequest = z.infer<typeof ResponsesRequestSchema>;

/** `value` as `schema` reads it, or a 400 naming the first refused field under `at`. */
export function parseAt<T>(schema: z.ZodType<T>, value: unknown, at: string): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const { param } = describeIssue(parsed.error);
  const where = param ? `${at}${param.startsWith('[') ? '' : '.'}${param}` : at;
  throw errors.badRequest(`Invalid value for '${where}': ${issue.message}`, where);
}

/** The request's top-level fields: unknown ones and documented ones we cannot serve refused first, then the schema. */
export function parseRequest(json: Record<string, unknown>): ResponsesRequest {
  for (const key in json) {
    if (!KNOWN_FIELDS.has(key)) throw errors.badRequest(`Unrecognized request argument supplied: ${key}`, key, 'unsupported_parameter');
    const why = REFUSED[key]?.(json[key]);
    if (why) throw errors.badRequest(why, key, 'unsupported_parameter');
  }
  const parsed = ResponsesRequestSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  const { message, param } = describeIssue(parsed.error);
  throw errors.badRequest(message, param);
}

/** The input as items: a string is one user message; each item checked by its type (a message may omit it). */
export function parseItems(input: ResponsesRequest['input']): InputItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') return [{ type: 'message', role: 'user', content: input }];
  return input.map((raw, i) => {
    const at = `input[${i}]`;
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw errors.badRequest(`Invalid value for '${at}': expected an object.`, at);
    const item = raw as Record<string, unknown>;
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    const schema = ITEM_SCHEMAS[type as keyof typeof ITEM_SCHEMAS];
    if (!schema) {
      const why =
        type === undefined
          ? 'an item needs a type (or a role, for a message).'
          : `items of type '${String(type)}' cannot be sent through this gateway (the tools that produce them run at OpenAI).`;
      throw errors.badRequest(`Invalid value for '${at}.type': ${why}`, `${at}.type`, 'unsupported_content');
    }
    return parseAt(schema as z.ZodType<InputItem>, { ...item, type }, at);
  });
}

/** The tools, each checked by its type; hosted ones kept as given (they are left out later). */
export function parseTools(tools: ResponsesRequest['tools']): Tool[] {
  return (tools ?? []).map((t, i) => {
    const at = `tools[${i}]`;
    if (t.type === 'function') return parseAt(FunctionToolSchema, t, at);
    if (t.type === 'custom') return parseAt(CustomToolSchema, t, at);
    if (t.type === 'namespace') return parseAt(NamespaceToolSchema, t, at);
    if (HOSTED_TOOLS.has(t.type)) return t as HostedTool;
    throw errors.badRequest(`Invalid value for '${at}.type': tools of type '${t.type}' are not supported.`, `${at}.type`, 'unsupported_parameter');
  });
}
