import type { ExtendedDelta } from '../../bus/frames.ts';
import type { CatracaError } from '../../errors.ts';
import { usageOut } from '../chat/encoder.ts';
import type { Collected } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';

// OpenAI's legacy text_completion objects. Streamed: one chunk per text delta (no role chunk), a
// last chunk with the finish reason, a usage chunk (choices []) when stream_options.include_usage,
// then `data: [DONE]`. Reasoning (of a reasoning model behind a translated request) is billed as
// output but has no place in a text completion: not relayed.

const DONE = 'data: [DONE]\n\n';

export class CompletionsEncoder implements ResponseEncoder {
  private readonly head: string;
  private readonly textPrefix: string;
  private textPrefixBytes?: Buffer;
  private static readonly textSuffix = ',"index":0,"logprobs":null,"finish_reason":null}]}\n\n';
  private static readonly textSuffixBytes = Buffer.from(CompletionsEncoder.textSuffix);

  constructor(
    private readonly ctx: EncoderContext,
    private readonly includeUsage: boolean,
  ) {
    this.head = `data: {"id":${JSON.stringify(ctx.requestId)},"object":"text_completion","created":${ctx.created},"model":${JSON.stringify(ctx.model)},`;
    this.textPrefix = `${this.head}"choices":[{"text":`;
  }

  open(): string {
    return '';
  }

  text(literal: Uint8Array): Uint8Array {
    this.textPrefixBytes ??= Buffer.from(this.textPrefix);
    return Buffer.concat([this.textPrefixBytes, literal, CompletionsEncoder.textSuffixBytes]);
  }

  delta(d: ExtendedDelta): string {
    return d.content ? `${this.textPrefix}${JSON.stringify(d.content)}${CompletionsEncoder.textSuffix}` : '';
  }

  keepalive(): string {
    return ': processing\n\n';
  }

  close(end: Ending): string {
    const finish = `${this.head}"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":${JSON.stringify(end.finishReason)}}]}\n\n`;
    const usage = this.includeUsage ? `${this.head}"choices":[],"usage":${JSON.stringify(usageOut(end.usage, end.costMicros, end.estimated))}}\n\n` : '';
    return finish + usage + DONE;
  }

  /** Mid-stream failure, as chat sends it (OpenRouter's shape): an `error` object and finish_reason "error". */
  fail(e: CatracaError): string {
    const error = JSON.stringify({ code: e.code, message: e.message, status: e.status });
    return `${this.head}"error":${error},"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"error"}]}\n\n${DONE}`;
  }

  body(out: Collected, end: Ending) {
    return {
      id: this.ctx.requestId,
      object: 'text_completion',
      created: this.ctx.created,
      model: this.ctx.model,
      choices: [{ text: out.content, index: 0, logprobs: null, finish_reason: end.finishReason }],
      usage: usageOut(end.usage, end.costMicros, end.estimated),
    };
  }
}
