import { REASONING_EFFORTS, type Reasoning, thinkingBudget } from '../../chat/reasoning.ts';
import { type UpstreamCall, UpstreamError } from '../types.ts';

// Request transform: an OpenAI chat request → Bedrock's Converse request. System and developer
// messages become `system` blocks; user and assistant turns `messages` whose content is blocks
// (text, toolUse); tool results go back in a user turn as toolResult blocks; consecutive turns of
// one role are merged (Converse wants them alternating). tools / tool_choice become toolConfig;
// max_tokens (the hold's cap), temperature, top_p and stop become inferenceConfig. For a reasoning
// model, OpenRouter's `reasoning` (or reasoning_effort) becomes a thinking budget in
// additionalModelRequestFields (Claude's on Bedrock). Only text content is sent (the front door
// refuses other parts for this protocol).

type Block = Record<string, unknown>;
type Turn = { role: 'user' | 'assistant'; content: Block[] };

/**
 * Text content as Converse blocks; a text part carrying a cache marker (OpenRouter's cache_control)
 * is followed by a cachePoint, where Bedrock caches the prompt up to.
 */
function textBlocks(c: unknown, where: string): Block[] {
  if (!Array.isArray(c)) {
    const t = text(c, where);
    return t ? [{ text: t }] : []; // Converse refuses blank text blocks
  }
  const out: Block[] = [];
  (c as Array<{ text?: unknown; cache_control?: unknown }>).forEach((p, j) => {
    const t = text([p], `${where}.content[${j}]`);
    if (t) out.push({ text: t });
    if (p?.cache_control != null) out.push({ cachePoint: { type: 'default' } });
  });
  return out;
}

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

function toolUses(calls: unknown, where: string): Block[] {
  if (!Array.isArray(calls)) throw new UpstreamError(400, 'unsupported_parameter', `${where}: tool_calls must be an array.`);
  return calls.map((c: { id?: unknown; function?: { name?: unknown; arguments?: unknown } }, j) => {
    let input: unknown = {};
    try {
      input = c.function?.arguments ? JSON.parse(String(c.function.arguments)) : {};
    } catch {
      throw new UpstreamError(400, 'invalid_tool_arguments', `${where}.tool_calls[${j}]: function.arguments is not valid JSON.`);
    }
    return { toolUse: { toolUseId: String(c.id ?? ''), name: String(c.function?.name ?? ''), input } };
  });
}

function toolConfig(rawTools: unknown, rawChoice: unknown): Block | undefined {
  if (rawTools === undefined || rawTools === null) return undefined;
  if (!Array.isArray(rawTools)) throw new UpstreamError(400, 'unsupported_parameter', 'tools must be an array.');
  const tools = rawTools.map((t: { type?: unknown; function?: { name?: unknown; description?: unknown; parameters?: unknown } }, i) => {
    if (t.type !== 'function' || !t.function?.name)
      throw new UpstreamError(400, 'unsupported_parameter', `tools[${i}]: only function tools are supported for this model.`);
    const spec: Block = { name: t.function.name, inputSchema: { json: t.function.parameters ?? { type: 'object', properties: {} } } };
    if (typeof t.function.description === 'string') spec.description = t.function.description;
    return { toolSpec: spec };
  });
  const out: Block = { tools };
  // Converse has no "none": the tools stay declared (earlier toolUse blocks need them) and the model chooses
  if (rawChoice === 'required') out.toolChoice = { any: {} };
  else if (rawChoice === 'auto') out.toolChoice = { auto: {} };
  else if (rawChoice && typeof rawChoice === 'object') {
    const name = (rawChoice as { function?: { name?: unknown } }).function?.name;
    if (typeof name !== 'string') throw new UpstreamError(400, 'unsupported_parameter', 'tool_choice is not one this model understands.');
    out.toolChoice = { tool: { name } };
  }
  return out;
}

function push(turns: Turn[], role: Turn['role'], blocks: Block[]): void {
  if (blocks.length === 0) return;
  const prev = turns[turns.length - 1];
  if (prev?.role === role) prev.content.push(...blocks);
  else turns.push({ role, content: blocks });
}

export function buildConverseBody({ job, model }: UpstreamCall): Record<string, unknown> {
  const b = job.body as Record<string, unknown>;
  if (b.functions) throw new UpstreamError(400, 'unsupported_parameter', 'The legacy functions parameter is not supported for this model; use tools.');
  const system: Block[] = [];
  const messages: Turn[] = [];
  ((b.messages as Array<Record<string, unknown>>) ?? []).forEach((m, i) => {
    const where = `messages[${i}]`;
    if (m.role === 'system' || m.role === 'developer') system.push(...textBlocks(m.content, where));
    else if (m.role === 'user') push(messages, 'user', textBlocks(m.content, where));
    else if (m.role === 'assistant') push(messages, 'assistant', [...textBlocks(m.content, where), ...(m.tool_calls ? toolUses(m.tool_calls, where) : [])]);
    else if (m.role === 'tool')
      push(messages, 'user', [{ toolResult: { toolUseId: String(m.tool_call_id ?? ''), content: [{ text: text(m.content, where) }] } }]);
    else throw new UpstreamError(400, 'unsupported_parameter', `${where}: role "${String(m.role)}" is not supported for this model.`);
  });
  const inference: Block = { maxTokens: job.max_tokens };
  if (typeof b.temperature === 'number') inference.temperature = Math.min(1, b.temperature);
  if (typeof b.top_p === 'number') inference.topP = b.top_p;
  if (typeof b.stop === 'string') inference.stopSequences = [b.stop];
  else if (Array.isArray(b.stop)) inference.stopSequences = b.stop;
  const out: Record<string, unknown> = { messages, inferenceConfig: inference };
  if (system.length) out.system = system;
  const tools = toolConfig(b.tools, b.tool_choice);
  if (tools) out.toolConfig = tools;
  const budget = model.reasoning ? thinkingOf(b, job.max_tokens) : undefined;
  if (budget !== undefined) {
    out.additionalModelRequestFields = { thinking: { type: 'enabled', budget_tokens: budget } };
    delete inference.temperature; // Claude takes no sampling changes with thinking
  }
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
