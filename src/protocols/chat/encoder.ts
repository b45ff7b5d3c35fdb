import type { ExtendedDelta } from '../../bus/frames.ts';
import type { UsageCount } from '../../bus/messages.ts';
import { brlNumber } from '../../billing/money.ts';
import type { CatracaError } from '../../errors.ts';
import type { Collected } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';

// OpenAI chat-completion wire objects, built as strings on the streaming hot path.

export interface UsageOut {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** BRL, as OpenRouter reports `cost` */
  cost: number;
  prompt_tokens_details?: { cached_tokens: number; cache_write_tokens?: number };
  completion_tokens_details?: { reasoning_tokens: number };
  estimated?: boolean;
}

/** Usage in OpenAI's shape: prompt_tokens counts all input, its details the cache reads; cost in BRL. */
export function usageOut(u: UsageCount, costMicros: bigint, estimated: boolean): UsageOut {
  const out: UsageOut = {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    cost: brlNumber(costMicros),
  };
  const writes = (u.cache_write_tokens ?? 0) + (u.cache_write_1h_tokens ?? 0);
  if (u.cached_tokens !== undefined || writes > 0) {
    out.prompt_tokens_details = { cached_tokens: u.cached_tokens ?? 0 };
    if (writes > 0) out.prompt_tokens_details.cache_write_tokens = writes;
  }
  if (u.reasoning_tokens !== undefined) out.completion_tokens_details = { reasoning_tokens: u.reasoning_tokens };
  if (estimated) out.estimated = true;
  return out;
}

/** The chunks of one streamed chat completion; `contentBytes` is the per-token hot path. */
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

/** The delta of an extended frame as OpenAI's chunk carries it (reasoning as OpenRouter names it). */
function chatDelta(d: ExtendedDelta): Record<string, unknown> | null {
  const out: Record<string, unknown> = {};
  if (d.content) out.content = d.content;
  if (d.reasoning) out.reasoning = d.reasoning;
  if (d.tool_calls) out.tool_calls = d.tool_calls;
  return Object.keys(out).length ? out : null;
}

export class ChatEncoder implements ResponseEncoder {
  private readonly chunks: ChunkEncoder;

  constructor(
    private readonly ctx: EncoderContext,
    private readonly includeUsage: boolean,
    /** OpenRouter's reasoning.exclude: the reasoning text is not shown (it is still billed) */
    private readonly excludeReasoning = false,
  ) {
    this.chunks = new ChunkEncoder(ctx.requestId, ctx.model, ctx.created);
  }

  open(): string {
    return this.chunks.role();
  }

  text(literal: Uint8Array): Uint8Array {
    return this.chunks.contentBytes(literal);
  }

  delta(d: ExtendedDelta): string {
    const delta = chatDelta(this.excludeReasoning ? { ...d, reasoning: undefined } : d);
    return delta ? this.chunks.delta(delta) : '';
  }

  keepalive(): string {
    return ChunkEncoder.keepalive;
  }

  close(end: Ending): string {
    const usage = this.includeUsage ? this.chunks.usage(usageOut(end.usage, end.costMicros, end.estimated)) : '';
    return this.chunks.finish(end.finishReason) + usage + ChunkEncoder.done;
  }

  fail(e: CatracaError): string {
    return this.chunks.error(e.code, e.message, e.status) + ChunkEncoder.done;
  }

  body(out: Collected, end: Ending) {
    const calls = out.toolCallList;
    const content = out.content;
    const reasoning = this.excludeReasoning ? '' : out.reasoning;
    const message: Record<string, unknown> = { role: 'assistant', content: calls.length && !content ? null : content, refusal: null };
    if (reasoning) message.reasoning = reasoning;
    if (calls.length) message.tool_calls = calls;
    return {
      id: this.ctx.requestId,
      object: 'chat.completion',
      created: this.ctx.created,
      model: this.ctx.model,
      system_fingerprint: null,
      choices: [{ index: 0, message, logprobs: null, finish_reason: end.finishReason }],
      usage: usageOut(end.usage, end.costMicros, end.estimated),
    };
  }
}
