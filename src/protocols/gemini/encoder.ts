import type { ExtendedDelta } from '../../bus/frames.ts';
import type { CatracaError } from '../../errors.ts';
import { Collected, type ToolCall } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';
import { finishReason, googleErrorBody, usageMetadata } from './wire.ts';

// Gemini's GenerateContentResponse: streamed (`alt=sse`) as one `data:` event per piece, each a
// whole response with the piece as its candidate's one part; the last carries finishReason and
// usageMetadata. Not streamed, the whole response. Reasoning is shown as `thought: true` parts only
// when the client asked for it (thinkingConfig.includeThoughts), as Google does. A function call is
// sent whole (Gemini has no argument pieces): the calls are gathered and go out with the last event.

const SEP = '\r\n\r\n';

type GeminiPart = Record<string, unknown>;

/** Tool arguments as Gemini's `args` object; arguments a vendor cut short are kept as a string under `_raw`. */
function argsOf(args: string): Record<string, unknown> {
  if (!args) return {};
  try {
    const v = JSON.parse(args) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : { value: v };
  } catch {
    return { _raw: args };
  }
}

/** A call as Gemini's functionCall part; one the vendor gave no id gets `call_<request id>_<n>`. */
const callPart = (call: ToolCall, n: number, requestId: string): GeminiPart => ({
  functionCall: { id: call.id || `call_${requestId}_${n}`, name: call.function.name, args: argsOf(call.function.arguments) },
});

export class GeminiEncoder implements ResponseEncoder {
  private readonly calls = new Collected();
  private readonly tail: string;
  private textPrefix = Buffer.from('data: {"candidates":[{"content":{"parts":[{"text":');

  constructor(
    private readonly ctx: EncoderContext,
    private readonly includeThoughts: boolean,
  ) {
    this.tail = `}],"role":"model"},"index":0}],"modelVersion":${JSON.stringify(ctx.model)},"responseId":${JSON.stringify(ctx.requestId)}}${SEP}`;
  }

  open(): string {
    return '';
  }

  text(literal: Uint8Array): Uint8Array {
    return Buffer.concat([this.textPrefix, literal, Buffer.from(this.tail)]);
  }

  delta(d: ExtendedDelta): string {
    let out = '';
    if (d.reasoning && this.includeThoughts) out += this.event([{ text: d.reasoning, thought: true }]);
    if (d.content) out += this.event([{ text: d.content }]);
    if (d.tool_calls) this.calls.toolCalls(d.tool_calls);
    return out;
  }

  keepalive(): string {
    return `: keepalive${SEP}`;
  }

  close(end: Ending): string {
    const calls = this.calls.toolCallList.map((c, n) => callPart(c, n, this.ctx.requestId));
    return this.event(calls.length ? calls : [{ text: '' }], end);
  }

  fail(e: CatracaError): string {
    return `data: ${JSON.stringify(googleErrorBody(e))}${SEP}`;
  }

  body(out: Collected, end: Ending) {
    const parts: GeminiPart[] = [];
    let calls = 0;
    for (const b of out.blocks) {
      if (b.type === 'text') parts.push({ text: b.text });
      else if (b.type === 'reasoning' && this.includeThoughts && b.text) parts.push({ text: b.text, thought: true });
      else if (b.type === 'tool_call') parts.push(callPart(b.call, calls++, this.ctx.requestId));
    }
    return this.response(parts, end);
  }

  private event(parts: GeminiPart[], end?: Ending): string {
    return `data: ${JSON.stringify(this.response(parts, end))}${SEP}`;
  }

  private response(parts: GeminiPart[], end?: Ending) {
    const candidate: Record<string, unknown> = { content: { parts, role: 'model' } };
    if (end) candidate.finishReason = finishReason(end.finishReason);
    candidate.index = 0;
    return {
      candidates: [candidate],
      ...(end ? { usageMetadata: usageMetadata(end.usage) } : {}),
      modelVersion: this.ctx.model,
      responseId: this.ctx.requestId,
    };
  }
}

/** countTokens' answer: the worker's `{"input_tokens": N}` as Google's `{"totalTokens": N}`. */
export class CountTokensEncoder implements ResponseEncoder {
  open = () => '';
  text = () => '';
  delta = () => '';
  keepalive = () => '';
  close = () => '';
  fail = () => '';
  body(out: Collected) {
    const { input_tokens } = JSON.parse(out.wholeBody) as { input_tokens: number };
    return { totalTokens: input_tokens };
  }
}
