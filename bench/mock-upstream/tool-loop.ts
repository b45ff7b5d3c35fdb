// What `mock-tool-loop` answers: while the last message is not a tool result, one call of a tool
// it was offered (the one tool_choice names, else the first), with arguments made from the tool's
// JSON schema: each required property (all of them when none is required) a string, "mock" — for
// a property named `input` (a free-form tool, as a gateway offers it) MOCK_LOOP_INPUT. After a tool
// result it answers like any other model: an agent's whole round trip.

export const MOCK_LOOP_INPUT = '*** Begin Patch\n*** End Patch\n';

type ChatTool = { function?: { name?: unknown; parameters?: { properties?: Record<string, unknown>; required?: unknown } } };

function argumentsFor(tool: ChatTool): string {
  const params = tool.function?.parameters ?? {};
  const names = Array.isArray(params.required) && params.required.length ? (params.required as string[]) : Object.keys(params.properties ?? {});
  return JSON.stringify(Object.fromEntries(names.map((n) => [n, n === 'input' ? MOCK_LOOP_INPUT : 'mock'])));
}

let calls = 0;

/** The call to make, or null when the model should answer with text. */
export function toolLoopCall(body: Record<string, unknown>): { id: string; name: string; arguments: string } | null {
  const messages = Array.isArray(body.messages) ? (body.messages as Array<{ role?: unknown }>) : [];
  const tools = Array.isArray(body.tools) ? (body.tools as ChatTool[]) : [];
  if (!tools.length || messages[messages.length - 1]?.role === 'tool') return null;
  const forced = (body.tool_choice as { function?: { name?: unknown } } | undefined)?.function?.name;
  const tool = tools.find((t) => t.function?.name === forced) ?? tools[0];
  return { id: `call_mock_loop_${++calls}`, name: String(tool.function?.name ?? ''), arguments: argumentsFor(tool) };
}
