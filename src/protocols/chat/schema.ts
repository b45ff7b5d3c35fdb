import { z } from 'zod';
import { OpenRouterFields } from './openrouter.ts';

// What the front door checks before anything is charged. Unknown OpenAI parameters pass through
// (loose objects) to the upstream untouched.
const ContentPart = z.looseObject({ type: z.string() });

export const ChatMessageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(ContentPart), z.null()]).optional(),
  name: z.string().optional(),
});

export const ChatRequestSchema = z
  .looseObject({
    model: z.string().min(1, 'model is required').optional(),
    messages: z.array(ChatMessageSchema).min(1, 'messages must contain at least one message'),
    stream: z.boolean().optional().nullable(),
    stream_options: z.looseObject({ include_usage: z.boolean().optional() }).optional().nullable(),
    max_tokens: z.number().int().positive().optional().nullable(),
    max_completion_tokens: z.number().int().positive().optional().nullable(),
    n: z.literal(1, { message: 'only n=1 is supported' }).optional().nullable(),
    temperature: z.number().min(0).max(2).optional().nullable(),
    top_p: z.number().min(0).max(1).optional().nullable(),
    ...OpenRouterFields,
  })
  .refine((b) => b.model !== undefined || (b.models?.length ?? 0) > 0, { message: 'model is required', path: ['model'] });

export type ChatRequest = z.infer<typeof ChatRequestSchema>;
