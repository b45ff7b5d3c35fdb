import { z } from 'zod';

// What the front door checks before anything is charged. Unknown OpenAI parameters pass through
// (loose objects) to the upstream untouched.
const ContentPart = z.looseObject({ type: z.string() });

export const ChatMessageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(ContentPart), z.null()]).optional(),
  name: z.string().optional(),
});

export const ChatRequestSchema = z.looseObject({
  model: z.string().min(1, 'model is required'),
  messages: z.array(ChatMessageSchema).min(1, 'messages must contain at least one message'),
  stream: z.boolean().optional().nullable(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).optional().nullable(),
  max_tokens: z.number().int().positive().optional().nullable(),
  max_completion_tokens: z.number().int().positive().optional().nullable(),
  n: z.literal(1, { message: 'only n=1 is supported' }).optional().nullable(),
  temperature: z.number().min(0).max(2).optional().nullable(),
  top_p: z.number().min(0).max(1).optional().nullable(),
});

export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/** First issue of a failed parse as (message, param) in OpenAI's style. */
export function describeIssue(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const param = issue.path.length
    ? issue.path
        .map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))
        .join('.')
        .replace(/\.\[/g, '[')
    : null;
  return { message: param ? `Invalid value for '${param}': ${issue.message}` : issue.message, param };
}
