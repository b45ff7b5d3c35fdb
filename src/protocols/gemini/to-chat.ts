import type { ModelRecord } from '../../db/models.ts';
import { Untranslatable } from '../messages/to-chat.ts';
import type { Content, FunctionDeclaration, GenerateContentRequest, Part } from './schema.ts';

// A Gemini generateContent request translated into chat completions, the API every adapter speaks:
//   systemInstruction (string or parts)       → a system message
//   contents: role "user" / "model"           → user / assistant messages ("function" → tool results)
//   text parts                                → text (content parts when there are images)
//   inlineData image/*                        → image_url (a data: URL); application/pdf → a file part
//   functionCall parts                        → assistant tool_calls (args → JSON arguments); a call
//                                               without an id gets `call_<turn>_<n>`
//   functionResponse parts                    → one `tool` message each, answering the call of the
//                                               previous model turn with that id, else that name
//   thought parts, thoughtSignature           → dropped (another vendor's reasoning)
//   fileData (Google's Files API URIs)        → refused: the file lives at Google
//   tools.functionDeclarations                → function tools (parametersJsonSchema as it is;
//                                               `parameters`, OpenAPI's schema, with its types lowercased)
//   other tools (googleSearch, codeExecution, urlContext, …) → refused: billed by Google per use
//   toolConfig.functionCallingConfig.mode     → AUTO auto, ANY required (one allowed name: that
//                                               function), NONE none
//   generationConfig: temperature, topP, stopSequences, presencePenalty, frequencyPenalty, seed as
//   they are; maxOutputTokens → max_tokens; responseMimeType application/json → response_format
//   json_object, with responseSchema / responseJsonSchema → json_schema; topK dropped;
//   thinkingConfig → reasoning_effort for an OpenAI-compatible reasoning model (budget < 4096 low,
//   < 16384 medium, else high; thinkingLevel as named), dropped for others
//   safetySettings                            → OFF / BLOCK_NONE / unspecified thresholds accepted
//                                               (nothing to apply); a stricter one refused: no
//                                               vendor behind this gateway applies Google's filters
//   cachedContent                             → refused (a cache stored at Google)

type ChatMessage = Record<string, unknown>;
type TranslationModel = Pick<ModelRecord, 'protocol' | 'reasoning'>;

const refuse = (param: string, message: string, code: 'unsupported_parameter' | 'unsupported_content' = 'unsupported_parameter'): never => {
  throw new Untranslatable({ param, code, message: `${param}: ${message}` });
};

const LENIENT_THRESHOLDS = new Set(['OFF', 'BLOCK_NONE', 'HARM_BLOCK_THRESHOLD_UNSPECIFIED']);

/** Checks that need no model: fields whose use Google bills beyond tokens, or filters nobody here applies. */
export function checkGeminiFields(req: GenerateContentRequest): void {
  if (req.cachedContent !== undefined) refuse('cachedContent', 'contexts cached at Google are not available through this gateway; send the contents.');
  req.safetySettings?.forEach((s, i) => {
    if (!LENIENT_THRESHOLDS.has(s.threshold))
      refuse(
        `safetySettings[${i}].threshold`,
        `"${s.threshold}" cannot be honoured: the vendors behind this gateway apply their own safety policies, not Google's thresholds (only OFF or BLOCK_NONE are accepted).`,
      );
  });
  req.tools?.forEach((t, i) => {
    for (const field of Object.keys(t))
      if (field !== 'functionDeclarations')
        refuse(`tools[${i}].${field}`, 'only functionDeclarations are available through this gateway (built-in tools are billed by the vendor per use).');
  });
  const g = req.generationConfig;
  if (g?.responseLogprobs === true) refuse('generationConfig.responseLogprobs', 'log probabilities are not available through this gateway.');
  const modalities = g?.responseModalities?.filter((m) => m.toUpperCase() !== 'TEXT');
  if (modalities?.length)
    refuse('generationConfig.responseModalities', `only TEXT output is available through this gateway (asked: ${modalities.join(', ')}).`);
}

function textOf(content: Content | string | undefined): string {
  if (content === undefined) return '';
  if (typeof content === 'string') return content;
  return (content.parts ?? [])
    .filter((p) => typeof p.text === 'string' && p.thought !== true)
    .map((p) => p.text)
    .join('');
}

/** Google's OpenAPI schema (`type: "OBJECT"`) as JSON Schema: type names lowercased, everywhere. */
export function jsonSchemaOf(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(jsonSchemaOf);
  if (!schema || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === 'type' && typeof v === 'string') out[k] = v.toLowerCase();
    else if (k === 'type' && Array.isArray(v)) out[k] = v.map((t) => (typeof t === 'string' ? t.toLowerCase() : t));
    else out[k] = jsonSchemaOf(v);
  }
  return out;
}

function mediaPart(p: Part, where: string): Record<string, unknown> {
  const { mimeType, data } = p.inlineData!;
  if (mimeType.startsWith('image/')) return { type: 'image_url', image_url: { url: `data:${mimeType};base64,${data}` } };
  if (mimeType === 'application/pdf') return { type: 'file', file: { filename: 'document.pdf', file_data: `data:application/pdf;base64,${data}` } };
  return refuse(`${where}.inlineData`, `inline data of type "${mimeType}" cannot be sent through this gateway (images and PDFs only).`, 'unsupported_content');
}

/** The id of the `n`th call of model turn `turn`, for a call that came without one. */
export const generatedCallId = (turn: number, n: number) => `call_${turn}_${n}`;

function chatMessages(req: GenerateContentRequest): ChatMessage[] {
  const out: ChatMessage[] = [];
  const system = textOf(req.systemInstruction);
  if (system) out.push({ role: 'system', content: system });
  // the calls of the last model turn, still unanswered: id and name
  let pending: Array<{ id: string; name: string }> = [];
  req.contents.forEach((c, i) => {
    const where = `contents[${i}]`;
    const parts = c.parts ?? [];
    if (c.role === 'model') {
      let text = '';
      const calls: ChatMessage[] = [];
      pending = [];
      parts.forEach((p, j) => {
        if (p.thought === true) return;
        if (p.functionCall) {
          const id = p.functionCall.id || generatedCallId(i, calls.length);
          pending.push({ id, name: p.functionCall.name });
          calls.push({ id, type: 'function', function: { name: p.functionCall.name, arguments: JSON.stringify(p.functionCall.args ?? {}) } });
        } else if (typeof p.text === 'string') text += p.text;
        else if (p.inlineData || p.fileData) refuse(`${where}.parts[${j}]`, 'media in a model turn cannot be sent to this model.', 'unsupported_content');
      });
      if (calls.length) out.push({ role: 'assistant', content: text || null, tool_calls: calls });
      else if (text) out.push({ role: 'assistant', content: text });
      return;
    }
    if (c.role !== undefined && c.role !== 'user' && c.role !== 'function')
      refuse(`${where}.role`, `"${c.role}" is not a role of the Gemini API (user or model).`);
    const content: Record<string, unknown>[] = [];
    parts.forEach((p, j) => {
      const at = `${where}.parts[${j}]`;
      if (p.functionResponse) {
        const r = p.functionResponse;
        const k = r.id ? pending.findIndex((c) => c.id === r.id) : pending.findIndex((c) => c.name === r.name);
        if (k < 0) refuse(`${at}.functionResponse`, `no functionCall "${r.name}" in the previous model turn is left for this response to answer.`);
        const [call] = pending.splice(k, 1);
        out.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(r.response ?? {}) });
      } else if (p.functionCall) refuse(`${at}.functionCall`, 'function calls belong to model turns.');
      else if (p.fileData)
        refuse(`${at}.fileData`, 'files stored at Google (the Files API) cannot be read through this gateway: send them inline.', 'unsupported_content');
      else if (p.inlineData) content.push(mediaPart(p, at));
      else if (typeof p.text === 'string' && p.thought !== true) content.push({ type: 'text', text: p.text });
    });
    if (content.length) out.push({ role: 'user', content: content.every((p) => p.type === 'text') ? content.map((p) => p.text).join('') : content });
  });
  return out;
}

function chatTool(f: FunctionDeclaration): Record<string, unknown> {
  const parameters = f.parametersJsonSchema ?? (f.parameters ? jsonSchemaOf(f.parameters) : { type: 'object', properties: {} });
  const fn: Record<string, unknown> = { name: f.name, parameters };
  if (f.description) fn.description = f.description;
  return { type: 'function', function: fn };
}

function toolChoice(req: GenerateContentRequest): unknown {
  const config = req.toolConfig?.functionCallingConfig;
  switch (config?.mode?.toUpperCase()) {
    case 'ANY':
    case 'VALIDATED': {
      const names = config.allowedFunctionNames ?? [];
      return names.length === 1 ? { type: 'function', function: { name: names[0] } } : 'required';
    }
    case 'NONE':
      return 'none';
    case 'AUTO':
      return 'auto';
    default:
      return undefined;
  }
}

const LEVELS: Record<string, string> = { minimal: 'low', low: 'low', medium: 'medium', high: 'high' };

function reasoningEffort(req: GenerateContentRequest): string | undefined {
  const t = req.generationConfig?.thinkingConfig;
  if (!t) return undefined;
  if (t.thinkingLevel) return LEVELS[t.thinkingLevel.toLowerCase()];
  const budget = t.thinkingBudget;
  if (budget === undefined || budget === 0) return undefined;
  if (budget < 0) return 'medium'; // dynamic
  return budget < 4096 ? 'low' : budget < 16384 ? 'medium' : 'high';
}

/** The chat-completions body for `req` on `model` (throws Untranslatable with the 400). */
export function toChat(req: GenerateContentRequest, model: TranslationModel, stream: boolean): Record<string, unknown> {
  checkGeminiFields(req);
  const out: Record<string, unknown> = { messages: chatMessages(req), stream };
  const g = req.generationConfig ?? {};
  const reasoning = model.reasoning && model.protocol === 'openai';
  if (g.maxOutputTokens !== undefined) out[reasoning ? 'max_completion_tokens' : 'max_tokens'] = g.maxOutputTokens;
  const tools = (req.tools ?? []).flatMap((t) => t.functionDeclarations ?? []).map(chatTool);
  if (tools.length) {
    out.tools = tools;
    const choice = toolChoice(req);
    if (choice !== undefined) out.tool_choice = choice;
  }
  if (g.temperature !== undefined) out.temperature = g.temperature;
  if (g.topP !== undefined) out.top_p = g.topP;
  if (g.stopSequences?.length) out.stop = g.stopSequences;
  if (g.presencePenalty !== undefined) out.presence_penalty = g.presencePenalty;
  if (g.frequencyPenalty !== undefined) out.frequency_penalty = g.frequencyPenalty;
  if (g.seed !== undefined) out.seed = g.seed;
  const schema = g.responseJsonSchema ?? (g.responseSchema ? jsonSchemaOf(g.responseSchema) : undefined);
  if (g.responseMimeType === 'application/json')
    out.response_format = schema ? { type: 'json_schema', json_schema: { name: 'response', schema } } : { type: 'json_object' };
  else if (g.responseMimeType && g.responseMimeType !== 'text/plain')
    refuse('generationConfig.responseMimeType', `"${g.responseMimeType}" is not available through this gateway (text/plain or application/json).`);
  const effort = reasoning ? reasoningEffort(req) : undefined;
  if (effort) out.reasoning_effort = effort;
  return out;
}
