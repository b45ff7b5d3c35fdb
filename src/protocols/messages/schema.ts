import { z } from 'zod';

// Anthropic's Messages request as the front door reads it: the fields it needs checked before
// anything is charged. Content blocks and tools are loose objects here; which of their fields
// reach a vendor is decided by the allowlists in policy.ts.

const required = (what: string) => (iss: { input?: unknown }) => (iss.input === undefined ? 'Field required' : what);

export const BlockSchema = z.looseObject({ type: z.string({ error: required('Input should be a valid string') }) });
export type Block = z.infer<typeof BlockSchema> & Record<string, unknown>;

const ContentSchema = z.union([z.string(), z.array(BlockSchema)], { error: required('Input should be a valid string or list of content blocks') });

export const MessageSchema = z.looseObject({
  // `system` turns inside messages: Claude Code sends them mid-conversation
  role: z.enum(['user', 'assistant', 'system'], { error: required("Input should be 'user' or 'assistant'") }),
  content: ContentSchema,
});
export type Message = { role: 'user' | 'assistant' | 'system'; content: string | Block[] };

const SystemSchema = z.union([z.string(), z.array(z.looseObject({ type: z.literal('text'), text: z.string() }))], {
  error: 'Input should be a valid string or list of text blocks',
});

const ToolSchema = z.looseObject({ name: z.string({ error: required('Input should be a valid string') }).min(1), type: z.string().optional() });
export type Tool = z.infer<typeof ToolSchema> & Record<string, unknown>;

const ToolChoiceSchema = z.looseObject({
  type: z.enum(['auto', 'any', 'tool', 'none'], { error: "Input should be 'auto', 'any', 'tool' or 'none'" }),
  name: z.string().optional(),
  disable_parallel_tool_use: z.boolean().optional(),
});

const ThinkingSchema = z.union(
  [
    z.looseObject({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1024, 'Input should be greater than or equal to 1024') }),
    z.looseObject({ type: z.literal('adaptive') }),
    z.looseObject({ type: z.literal('disabled') }),
  ],
  { error: "Input should be {'type': 'enabled', 'budget_tokens': N}, {'type': 'adaptive'} or {'type': 'disabled'}" },
);

/** What /v1/messages and /v1/messages/count_tokens share. */
const common = {
  model: z.string({ error: required('Input should be a valid string') }).min(1, 'Field required'),
  messages: z.array(MessageSchema, { error: required('Input should be a valid list') }),
  system: SystemSchema.optional(),
  tools: z.array(ToolSchema).optional(),
  tool_choice: ToolChoiceSchema.optional(),
  thinking: ThinkingSchema.optional(),
  /** automatic prompt caching: Anthropic puts the breakpoint on the last cacheable block itself */
  cache_control: z
    .looseObject({ type: z.literal('ephemeral'), ttl: z.enum(['5m', '1h']).optional() })
    .nullable()
    .optional(),
};

export const MessagesRequestSchema = z
  .looseObject({
    ...common,
    max_tokens: z
      .number({ error: required('Input should be a valid integer') })
      .int('Input should be a valid integer')
      .min(1, 'Input should be greater than or equal to 1'),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().min(0).optional(),
    stop_sequences: z.array(z.string()).optional(),
    metadata: z.looseObject({ user_id: z.string().max(256).nullable().optional() }).optional(),
  })
  .superRefine((b, ctx) => {
    if (b.messages.length === 0) ctx.addIssue({ code: 'custom', path: ['messages'], message: 'At least one message is required' });
    if (b.thinking?.type === 'enabled' && (b.thinking.budget_tokens as number) >= b.max_tokens) {
      ctx.addIssue({ code: 'custom', path: ['max_tokens'], message: '`max_tokens` must be greater than `thinking.budget_tokens`' });
    }
  });
export type MessagesRequest = z.infer<typeof MessagesRequestSchema>;

export const CountTokensRequestSchema = z.looseObject(common).superRefine((b, ctx) => {
  if (b.messages.length === 0) ctx.addIssue({ code: 'custom', path: ['messages'], message: 'At least one message is required' });
});
export type CountTokensRequest = z.infer<typeof CountTokensRequestSchema>;

/** The part of a request body both routes read (a count is a messages request minus max_tokens and stream). */
export interface AnthropicBody {
  messages: Message[];
  system?: string | Array<{ type: 'text'; text: string } & Record<string, unknown>>;
  tools?: Tool[];
  tool_choice?: { type: 'auto' | 'any' | 'tool' | 'none'; name?: string; disable_parallel_tool_use?: boolean };
  thinking?: { type: 'enabled'; budget_tokens: number } | { type: 'adaptive' } | { type: 'disabled' };
  [field: string]: unknown;
}

/** Anthropic's own wording of a refused field: `messages.0.content: Field required`. */
export function describeAnthropicIssue(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const param = issue.path.length ? issue.path.map(String).join('.') : null;
  return { message: param ? `${param}: ${issue.message}` : issue.message, param };
}
