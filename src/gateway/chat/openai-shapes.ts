import type { ToolCallDelta } from '../../bus/messages.ts';

// OpenAI chat-completion wire objects, built as strings on the streaming hot path.

export interface UsageOut {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** BRL, as OpenRouter reports `cost` */
  cost: number;
  estimated?: boolean;
}

export class ChunkEncoder {
  private head: string;
  private contentPrefix: string;
  private contentPrefixBytes?: Buffer;
  private static contentSuffix = '},"logprobs":null,"finish_reason":null}]}\n\n';
  private static contentSuffixBytes = Buffer.from(ChunkEncoder.contentSuffix);

  constructor(
    readonly id: string,
    readonly model: string,
    readonly created: number,
  ) {
    this.head = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"system_fingerprint":null,`;
    this.contentPrefix = `${this.head}"choices":[{"index":0,"delta":{"content":`;
  }

  /** A content chunk around `literal`, the JSON string literal of the text (a worker frame's bytes, copied as they are). */
  contentBytes(literal: Uint8Array): Buffer {
    this.contentPrefixBytes ??= Buffer.from(this.contentPrefix);
    return Buffer.concat([this.contentPrefixBytes, literal, ChunkEncoder.contentSuffixBytes]);
  }

  role(): string {
    return `${this.head}"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  content(text: string): string {
    return `${this.contentPrefix}${JSON.stringify(text)}${ChunkEncoder.contentSuffix}`;
  }

  /** A chunk with any delta object (tool-call pieces, possibly with content). */
  delta(delta: Record<string, unknown>): string {
    return `${this.head}"choices":[{"index":0,"delta":${JSON.stringify(delta)},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  finish(reason: string): string {
    return `${this.head}"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(reason)}}]}\n\n`;
  }

  usage(usage: UsageOut): string {
    return `${this.head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
  }

  /** Mid-stream failure, as OpenRouter sends it: an `error` object and finish_reason "error". */
  error(code: string, message: string, status: number): string {
    return `${this.head}"error":${JSON.stringify({ code, message, status })},"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"error"}]}\n\n`;
  }

  static readonly done = 'data: [DONE]\n\n';
  static readonly keepalive = ': processing\n\n';
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** Merges streamed tool-call pieces by index: id and name as given, arguments concatenated. */
export function mergeToolCalls(into: ToolCall[], deltas: ToolCallDelta[]): void {
  for (const d of deltas) {
    const call = (into[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
    if (d.id) call.id = d.id;
    if (d.function?.name) call.function.name = d.function.name;
    if (d.function?.arguments) call.function.arguments += d.function.arguments;
  }
}

export function completionBody(
  id: string,
  model: string,
  created: number,
  content: string,
  finishReason: string,
  usage: UsageOut,
  toolCalls: ToolCall[] = [],
  reasoning = '',
) {
  const calls = toolCalls.filter(Boolean);
  const message: Record<string, unknown> = { role: 'assistant', content: calls.length && !content ? null : content, refusal: null };
  if (reasoning) message.reasoning = reasoning;
  if (calls.length) message.tool_calls = calls;
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    system_fingerprint: null,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
    usage,
  };
}
