import { z } from 'zod';

// The Gemini API's generateContent / countTokens request as @google/genai and Gemini CLI send it
// (camelCase JSON). Unknown fields are accepted and never forwarded: only what to-chat.ts reads
// reaches a vendor.

const PartSchema = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  thoughtSignature: z.string().optional(),
  inlineData: z.looseObject({ mimeType: z.string(), data: z.string() }).optional(),
  fileData: z.looseObject({ mimeType: z.string().optional(), fileUri: z.string() }).optional(),
  functionCall: z.looseObject({ id: z.string().optional(), name: z.string().min(1), args: z.record(z.string(), z.unknown()).optional() }).optional(),
  functionResponse: z.looseObject({ id: z.string().optional(), name: z.string().min(1), response: z.record(z.string(), z.unknown()).optional() }).optional(),
});
export type Part = z.infer<typeof PartSchema>;

const ContentSchema = z.looseObject({
  role: z.string().optional(),
  parts: z.array(PartSchema).optional(),
});
export type Content = z.infer<typeof ContentSchema>;

const FunctionDeclarationSchema = z.looseObject({
  name: z.string().min(1),
  description: z.string().optional(),
  parameters: z.record(z.string(), z.unknown()).optional(),
  parametersJsonSchema: z.unknown().optional(),
});
export type FunctionDeclaration = z.infer<typeof FunctionDeclarationSchema>;

const ToolSchema = z.looseObject({ functionDeclarations: z.array(FunctionDeclarationSchema).optional() });
export type Tool = z.infer<typeof ToolSchema>;

const ThinkingConfigSchema = z.looseObject({
  includeThoughts: z.boolean().optional(),
  thinkingBudget: z.number().int().optional(),
  thinkingLevel: z.string().optional(),
});

const GenerationConfigSchema = z.looseObject({
  temperature: z.number().min(0).max(2).optional(),
  topP: z.number().min(0).max(1).optional(),
  topK: z.number().optional(),
  candidateCount: z.literal(1, { message: 'only candidateCount 1 is supported' }).optional(),
  maxOutputTokens: z.number().int().min(1).optional(),
  stopSequences: z.array(z.string()).optional(),
  presencePenalty: z.number().optional(),
  frequencyPenalty: z.number().optional(),
  seed: z.number().int().optional(),
  responseMimeType: z.string().optional(),
  responseSchema: z.record(z.string(), z.unknown()).optional(),
  responseJsonSchema: z.unknown().optional(),
  responseModalities: z.array(z.string()).optional(),
  responseLogprobs: z.boolean().optional(),
  thinkingConfig: ThinkingConfigSchema.optional(),
});
export type GenerationConfig = z.infer<typeof GenerationConfigSchema>;

const SafetySettingSchema = z.looseObject({ category: z.string(), threshold: z.string() });

export const GenerateContentRequestSchema = z.looseObject({
  contents: z.array(ContentSchema).min(1, 'contents must not be empty'),
  systemInstruction: z.union([z.string(), ContentSchema]).optional(),
  tools: z.array(ToolSchema).optional(),
  toolConfig: z
    .looseObject({
      functionCallingConfig: z.looseObject({ mode: z.string().optional(), allowedFunctionNames: z.array(z.string()).optional() }).optional(),
    })
    .optional(),
  generationConfig: GenerationConfigSchema.optional(),
  safetySettings: z.array(SafetySettingSchema).optional(),
  cachedContent: z.string().optional(),
});
export type GenerateContentRequest = z.infer<typeof GenerateContentRequestSchema>;

/** countTokens: the contents alone, or a whole generateContentRequest. */
export const CountTokensRequestSchema = z.looseObject({
  contents: z.array(ContentSchema).optional(),
  generateContentRequest: z.looseObject({}).optional(),
});

/** The first issue of a failed parse, worded as Google words it: `Invalid value at 'contents[0].parts' …`. */
export function describeGeminiIssue(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const param = issue.path.length
    ? issue.path
        .map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))
        .join('.')
        .replace(/\.\[/g, '[')
    : null;
  return { message: param ? `Invalid value at '${param}': ${issue.message}` : issue.message, param };
}
