import { REASONING_EFFORTS, type Reasoning, thinkingBudget } from '../../chat/reasoning.ts';
import { type UpstreamCall, UpstreamError } from '../types.ts';

// Request transform: an OpenAI chat request → Gemini's generateContent. System and developer
// messages become systemInstruction; user and assistant turns `contents` (roles user and model)
// of parts; assistant tool calls functionCall parts; tool results functionResponse parts in a user
// turn (named after the call they answer: Gemini matches results by name); consecutive turns of one
// role are merged. tools → functionDeclarations, tool_choice → functionCallingConfig, max_tokens
// (the hold's cap) → maxOutputTokens, temperature/top_p/stop → generationConfig. A reasoning model
// gets a thinkingBudget (OpenRouter's `reasoning`, or reasoning_effort) and its thoughts back
// (includeThoughts). Only text content is sent.

type Part = Record<string, unknown>;
type Content = { role: 'user' | 'model'; parts: Part[] };

function text(c: unknown, where: string): string {
  if (typeof c === 'string') return c;
  if (c == null) return '';
  if (Array.isArray(c))
    return c
      .map((p: { type?: unknown; text?: unknown }, j) => {
        if (p?.type === 'text' && typeof p.text === 'string') return p.text;
        throw new UpstreamError(400, 'unsupported_content', `${where}.content[${j}]: only text content parts can be sent to this model.`);
      })
      .join('\n');
  throw new UpstreamError(400, 'unsupported_content', `${where}: unsupported content.`);
}

function push(contents: Content[], role: Content['role'], parts: Part[]): void {
  if (parts.length === 0) return;
  const prev = contents[contents.length - 1];
  if (prev?.role === role) prev.parts.push(...parts);
  else contents.push({ role, parts });
}

function functionCalls(calls: unknown, where: string, names: Map<string, string>): Part[] {
  if (!Array.isArray(calls)) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool_calls must be an array.`);
  return calls.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, j) => {
    let args: unknown = {};
    try {
      args = c.function?.arguments ? JSON.parse(String(c.function.arguments)) : {};
    } catch {
      throw new UpstreamError(400, 'invalid_tool_arguments', `${where}.tool_calls[${j}]: function.arguments is not valid JSON.`);
    }
    const name = String(c.function?.name ?? '');
    if (typeof c.id === 'string') names.set(c.id, name);
    return { functionCall: { name, args } };
  });
}

/** A tool's answer as Gemini's functionResponse.response (an object): its JSON when it is an object, else {result}. */
function toolResponse(content: string): Record<string, unknown> {
  try {
    const v = JSON.parse(content);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    /* plain text */
  }
  return { result: content };
}

function tools(raw: unknown): Part[] | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!Array.isArray(raw)) throw new UpstreamError(400, 'unsupported_parameter', 'tools must be an array.');
  const functionDeclarations = raw.map((t: { type?: unknown; function?: { name?: unknown; description?: unknown; parameters?: unknown } }, i) => {
    if (t.type !== 'function' || !t.function?.name)
      throw new UpstreamError(400, 'unsupported_parameter', `tools[${i}]: only function tools are supported for this model.`);
    const d: Part = { name: t.function.name };
    if (typeof t.function.description === 'string') d.description = t.function.description;
    if (t.function.parameters !== undefined) d.parameters = t.function.parameters;
    return d;
  });
  return [{ functionDeclarations }];
}

function toolConfig(raw: unknown): Part | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (raw === 'auto') return { functionCallingConfig: { mode: 'AUTO' } };
  if (raw === 'required') return { functionCallingConfig: { mode: 'ANY' } };
  if (raw === 'none') return { functionCallingConfig: { mode: 'NONE' } };
  const name = (raw as { function?: { name?: unknown } })?.function?.name;
  if (typeof name === 'string') return { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: [name] } };
  throw new UpstreamError(400, 'unsupported_parameter', 'tool_choice is not one this model understands.');
}

export function buildGeminiBody({ job, model }: UpstreamCall): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  if (b.functions) throw new UpstreamError(400, 'unsupported_parameter', 'The legacy functions parameter is not supported for this model; use tools.');
  const system: Part[] = [];
  const contents: Content[] = [];
  const names = new Map<string, string>(); // tool-call id → function name
  ((b.messages as Array<Record<string, unknown>>) ?? []).forEach((m, i) => {
    const where = `messages[${i}]`;
    const said = text(m.content, where);
    const parts = said ? [{ text: said }] : [];
    if (m.role === 'system' || m.role === 'developer') system.push(...parts);
    else if (m.role === 'user') push(contents, 'user', parts);
    else if (m.role === 'assistant') push(contents, 'model', [...parts, ...(m.tool_calls ? functionCalls(m.tool_calls, where, names) : [])]);
    else if (m.role === 'tool') {
      const name = names.get(String(m.tool_call_id ?? ''));
      if (!name) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool_call_id does not match a tool call of an earlier assistant message.`);
      push(contents, 'user', [{ functionResponse: { name, response: toolResponse(said) } }]);
    } else throw new UpstreamError(400, 'unsupported_parameter', `${where}: role "${String(m.role)}" is not supported for this model.`);
  });
  const generation: Record<string, unknown> = { maxOutputTokens: job.max_tokens };
  if (typeof b.temperature === 'number') generation.temperature = b.temperature;
  if (typeof b.top_p === 'number') generation.topP = b.top_p;
  if (typeof b.stop === 'string') generation.stopSequences = [b.stop];
  else if (Array.isArray(b.stop)) generation.stopSequences = b.stop;
  const budget = model.reasoning ? thinkingOf(b, job.max_tokens) : undefined;
  if (budget !== undefined) generation.thinkingConfig = { thinkingBudget: budget, includeThoughts: true };
  const out: Record<string, unknown> = { contents, generationConfig: generation };
  if (system.length) out.systemInstruction = { parts: system };
  const t = tools(b.tools);
  if (t) out.tools = t;
  const tc = toolConfig(b.tool_choice);
  if (tc) out.toolConfig = tc;
  return out;
}

function thinkingOf(b: Record<string, unknown>, maxTokens: number): number | undefined {
  const r = b.reasoning && typeof b.reasoning === 'object' ? (b.reasoning as Reasoning) : null;
  if (r) return thinkingBudget(r, maxTokens);
  const effort = b.reasoning_effort;
  if (typeof effort === 'string' && (REASONING_EFFORTS as readonly string[]).includes(effort))
    return thinkingBudget({ effort: effort as Reasoning['effort'] }, maxTokens);
  return undefined;
}
