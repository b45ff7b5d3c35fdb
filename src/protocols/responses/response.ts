import { brlNumber } from '../../billing/money.ts';
import type { UsageCount } from '../../bus/messages.ts';
import type { ResponsesRequest, Tool } from './schema.ts';

// The Response object (`object: "response"`): what the stream's response.* events carry, what a
// request that is not streamed answers, and what GET /v1/responses/{id} returns. Every field
// OpenAI's has, with its defaults, so that clients that read them (the SDKs, Codex) find them.

/** The request's fields a Response echoes (stored with it as `params`). */
export interface Echo {
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  metadata: Record<string, string>;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  prompt_cache_key: string | null;
  reasoning: { effort: string | null; summary: string | null };
  safety_identifier: string | null;
  service_tier: string;
  store: boolean;
  temperature: number;
  text: Record<string, unknown>;
  tool_choice: unknown;
  tools: Tool[];
  top_logprobs: number;
  top_p: number;
  truncation: 'disabled';
  user: string | null;
}

export function echoOf(r: ResponsesRequest, tools: Tool[]): Echo {
  return {
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    max_tool_calls: r.max_tool_calls ?? null,
    metadata: r.metadata ?? {},
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: r.previous_response_id ?? null,
    prompt_cache_key: r.prompt_cache_key ?? null,
    reasoning: { effort: r.reasoning?.effort ?? null, summary: r.reasoning?.summary ?? null },
    safety_identifier: r.safety_identifier ?? null,
    service_tier: r.service_tier ?? 'default',
    store: r.store ?? true,
    temperature: r.temperature ?? 1,
    text: { format: r.text?.format ?? { type: 'text' }, ...(r.text?.verbosity ? { verbosity: r.text.verbosity } : {}) },
    tool_choice: r.tool_choice ?? 'auto',
    tools,
    top_logprobs: r.top_logprobs ?? 0,
    top_p: r.top_p ?? 1,
    truncation: 'disabled',
    user: r.user ?? null,
  };
}

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
  /** BRL, as chat's usage.cost */
  cost: number;
  estimated?: boolean;
}

/** Usage in the Responses shape: input counts everything billed as input, details always present (0 when none). */
export function usageOf(u: UsageCount, costMicros: bigint, estimated: boolean): ResponseUsage {
  const out: ResponseUsage = {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
    cost: brlNumber(costMicros),
  };
  if (estimated) out.estimated = true;
  return out;
}

export type Status = 'in_progress' | 'completed' | 'incomplete' | 'failed';

/** How a finish reason ends a response: completed, or incomplete and why. */
export function statusOf(finishReason: string): { status: Status; incomplete_details: { reason: string } | null } {
  if (finishReason === 'length') return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
  if (finishReason === 'content_filter') return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } };
  return { status: 'completed', incomplete_details: null };
}

export interface ResponseState {
  id: string;
  created_at: number;
  model: string;
  status: Status;
  output: unknown[];
  usage: ResponseUsage | null;
  incomplete_details?: { reason: string } | null;
  error?: { code: string; message: string } | null;
}

export function responseObject(s: ResponseState, echo: Echo) {
  return {
    id: s.id,
    object: 'response' as const,
    created_at: s.created_at,
    status: s.status,
    background: false,
    error: s.error ?? null,
    incomplete_details: s.incomplete_details ?? null,
    instructions: echo.instructions,
    max_output_tokens: echo.max_output_tokens,
    max_tool_calls: echo.max_tool_calls,
    model: s.model,
    output: s.output,
    parallel_tool_calls: echo.parallel_tool_calls,
    previous_response_id: echo.previous_response_id,
    prompt_cache_key: echo.prompt_cache_key,
    reasoning: echo.reasoning,
    safety_identifier: echo.safety_identifier,
    service_tier: echo.service_tier,
    store: echo.store,
    temperature: echo.temperature,
    text: echo.text,
    tool_choice: echo.tool_choice,
    tools: echo.tools,
    top_logprobs: echo.top_logprobs,
    top_p: echo.top_p,
    truncation: echo.truncation,
    usage: s.usage,
    user: echo.user,
    metadata: echo.metadata,
  };
}

export type ResponseObject = ReturnType<typeof responseObject>;
