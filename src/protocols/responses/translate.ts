import type { ParamRefusal } from '../../chat/params.ts';
import { type ChatMessage, chatMessages, type Item } from './items.ts';
import type { ResponsesRequest } from './schema.ts';
import type { ChatTools } from './tools.ts';

// A Responses request as the chat-completion body every adapter takes (job api 'chat'). The chat
// parameter policy (src/chat/params.ts) then decides, per model, what reaches the vendor, exactly
// as for POST /v1/chat/completions:
//   instructions            a system message first (not carried over by previous_response_id)
//   input (+ the previous   messages (./items.ts)
//   response's input and
//   output)
//   tools, tool_choice,     function tools (./tools.ts); parallel_tool_calls only with tools
//   parallel_tool_calls
//   text.format             response_format (json_schema, json_object; text: nothing)
//   text.verbosity          verbosity
//   reasoning.effort        reasoning_effort (reasoning.summary: the vendor's reasoning, when it
//                           streams some, is relayed as a reasoning summary anyway)
//   max_output_tokens       max_completion_tokens (the hold's cap; also the name reasoning models need)
//   temperature, top_p, user, safety_identifier, prompt_cache_key, service_tier   the same names
// Accepted and not sent: store, metadata, include, client_metadata, truncation 'disabled',
// max_tool_calls (hosted tools only), stream_options, previous_response_id (resolved here).

export interface ChatBody {
  body: Record<string, unknown> & { messages: ChatMessage[] };
  /** where each message came from (for refusals) */
  origins: string[];
}

const SAME_NAME = ['temperature', 'top_p', 'user', 'safety_identifier', 'prompt_cache_key', 'service_tier', 'sim'] as const;

function responseFormat(format: NonNullable<ResponsesRequest['text']>['format']): Record<string, unknown> | undefined {
  if (!format || format.type === 'text') return undefined;
  if (format.type === 'json_object') return { type: 'json_object' };
  const { name, schema, description, strict } = format as { name: string; schema: unknown; description?: string | null; strict?: boolean | null };
  return { type: 'json_schema', json_schema: { name, schema, ...(description ? { description } : {}), ...(typeof strict === 'boolean' ? { strict } : {}) } };
}

/** The chat body for `conversation` (the previous response's items, then this request's). */
export function chatBody(r: ResponsesRequest, tools: ChatTools, conversation: Array<{ item: Item; at: string }>): ChatBody {
  const { messages, origins } = chatMessages(conversation, r.instructions);
  const body: ChatBody['body'] = { messages };
  if (tools.tools.length) {
    body.tools = tools.tools;
    if (tools.choice !== undefined) body.tool_choice = tools.choice;
    if (typeof r.parallel_tool_calls === 'boolean') body.parallel_tool_calls = r.parallel_tool_calls;
  }
  const format = responseFormat(r.text?.format);
  if (format) body.response_format = format;
  if (r.text?.verbosity) body.verbosity = r.text.verbosity;
  if (r.reasoning?.effort) body.reasoning_effort = r.reasoning.effort;
  for (const f of SAME_NAME) if (r[f] !== undefined && r[f] !== null) body[f] = r[f];
  return { body, origins };
}

/** Chat field → the Responses field the client set. */
const CLIENT_PARAM: Record<string, string> = {
  response_format: 'text.format',
  reasoning_effort: 'reasoning.effort',
  verbosity: 'text.verbosity',
  max_completion_tokens: 'max_output_tokens',
};

/** The chat policy's refusal, naming the client's field instead of the translated one. */
export function clientRefusal(refusal: ParamRefusal, origins: string[]): ParamRefusal {
  const m = /^messages\[(\d+)\](.*)$/.exec(refusal.param);
  const param = m ? `${origins[Number(m[1])] ?? 'input'}${m[2]}` : (CLIENT_PARAM[refusal.param] ?? refusal.param);
  return { ...refusal, param };
}
