import type { ExtendedDelta } from '../../bus/frames.ts';
import type { CatracaError } from '../../errors.ts';
import type { Collected } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';
import { idBase, responseIdOf } from './ids.ts';
import { OutputItems } from './output.ts';
import { type Echo, type ResponseObject, responseObject, statusOf, usageOf } from './response.ts';
import type { ClientTool } from './tools.ts';

// One response on the wire. Streamed: response.created and response.in_progress, the output items'
// events (./output.ts), then response.completed — or response.incomplete when the output cap cut
// it — with the whole Response object and its usage; a failure after the stream opened is an
// `error` event and response.failed. Not streamed: the Response object. Both carry the same ids.

/** What happens to a finished response before its end is written (storing it). */
export type OnFinal = (response: ResponseObject) => Promise<void>;

export class ResponsesEncoder implements ResponseEncoder {
  private readonly id: string;
  private readonly out: OutputItems;
  private opened = false;
  /** the done events of the last item, written with the final event */
  private tail = '';
  private final?: ResponseObject;

  constructor(
    private readonly ctx: EncoderContext,
    private readonly echo: Echo,
    tools: Map<string, ClientTool>,
    private readonly onFinal?: OnFinal,
  ) {
    this.id = responseIdOf(ctx.requestId);
    this.out = new OutputItems(idBase(ctx.requestId), tools, ctx.streaming);
  }

  private snapshot(status: 'in_progress' | 'failed', error: { code: string; message: string } | null = null): ResponseObject {
    return responseObject(
      { id: this.id, created_at: this.ctx.created, model: this.ctx.model, status, output: [...this.out.items], usage: null, error },
      this.echo,
    );
  }

  /** response.created and response.in_progress, once, before anything else. */
  private opening(): string {
    if (this.opened || !this.ctx.streaming) return '';
    this.opened = true;
    const response = JSON.stringify(this.snapshot('in_progress'));
    return this.out.eventWithJson('response.created', 'response', response) + this.out.eventWithJson('response.in_progress', 'response', response);
  }

  open(): string {
    return this.opening();
  }

  text(literal: Uint8Array): Uint8Array {
    const opening = this.opening();
    const { lead, head } = this.out.textLiteral(literal);
    return Buffer.concat([Buffer.from(opening + lead + head), literal, OutputItems.deltaSuffix]);
  }

  delta(d: ExtendedDelta): string {
    let s = this.opening();
    if (d.reasoning) s += this.out.reasoning(d.reasoning);
    if (d.content) s += this.out.text(d.content);
    for (const c of d.tool_calls ?? []) s += this.out.toolCall(c);
    return s; // a reasoning signature or redacted reasoning: nothing a Responses client can use
  }

  keepalive(): string {
    return ': keepalive\n\n';
  }

  /** The final Response object: the last item ended (its events kept for the stream's end). */
  private settle(end: Ending, collected?: Collected): ResponseObject {
    if (this.final) return this.final;
    if (collected) replay(this.out, collected);
    const { status, incomplete_details } = statusOf(end.finishReason);
    this.tail = this.opening() + this.out.closeCurrent(status === 'incomplete' ? 'incomplete' : 'completed');
    const usage = usageOf(end.usage, end.costMicros, end.estimated);
    this.final = responseObject(
      { id: this.id, created_at: this.ctx.created, model: this.ctx.model, status, incomplete_details, output: this.out.items, usage },
      this.echo,
    );
    return this.final;
  }

  beforeEnd(collected: Collected, end: Ending): Promise<void> | undefined {
    const final = this.settle(end, this.ctx.streaming ? undefined : collected);
    return this.onFinal?.(final);
  }

  close(end: Ending): string {
    const final = this.settle(end);
    const type = final.status === 'incomplete' ? 'response.incomplete' : 'response.completed';
    return this.tail + this.out.event(type, { response: final });
  }

  fail(e: CatracaError): string {
    const opening = this.opening();
    const error = { code: e.code, message: e.message };
    return (
      opening +
      this.out.event('error', { code: e.code, message: e.message, param: e.param }) +
      this.out.event('response.failed', { response: this.snapshot('failed', error) })
    );
  }

  body(collected: Collected, end: Ending): ResponseObject {
    return this.settle(end, collected);
  }
}

/** An answer that was not streamed, item by item as its frames came. */
function replay(out: OutputItems, collected: Collected): void {
  let callIndex = 0;
  for (const b of collected.blocks) {
    if (b.type === 'text') out.text(b.text);
    else if (b.type === 'reasoning' && b.text) out.reasoning(b.text);
    else if (b.type === 'tool_call') {
      const { id, function: fn } = b.call;
      out.toolCall({ index: callIndex++, id, function: { name: fn.name, arguments: fn.arguments } });
    }
  }
}
