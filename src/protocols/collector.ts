import type { ExtendedDelta } from '../bus/frames.ts';
import type { ToolCallDelta } from '../bus/messages.ts';

// The answer of a request that is not streamed, gathered from its frames in order: text,
// reasoning (with its signature), redacted reasoning and tool calls, as the blocks they form,
// and the pieces of a whole body (embeddings, token counts).

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type Block =
  | { type: 'text'; text: string }
  | { type: 'reasoning'; text: string; signature?: string }
  | { type: 'redacted_reasoning'; data: string }
  | { type: 'tool_call'; call: ToolCall };

export class Collected {
  readonly blocks: Block[] = [];
  /** tool calls by their stream index */
  private readonly calls: ToolCall[] = [];
  private body = '';

  text(piece: string): void {
    const last = this.blocks[this.blocks.length - 1];
    if (last?.type === 'text') last.text += piece;
    else this.blocks.push({ type: 'text', text: piece });
  }

  delta(d: ExtendedDelta): void {
    if (d.reasoning) {
      const last = this.blocks[this.blocks.length - 1];
      if (last?.type === 'reasoning' && last.signature === undefined) last.text += d.reasoning;
      else this.blocks.push({ type: 'reasoning', text: d.reasoning });
    }
    if (d.reasoning_signature !== undefined) {
      const last = this.blocks[this.blocks.length - 1];
      if (last?.type === 'reasoning' && last.signature === undefined) last.signature = d.reasoning_signature;
      else this.blocks.push({ type: 'reasoning', text: '', signature: d.reasoning_signature });
    }
    if (d.redacted_reasoning !== undefined) this.blocks.push({ type: 'redacted_reasoning', data: d.redacted_reasoning });
    if (d.content) this.text(d.content);
    if (d.tool_calls) this.toolCalls(d.tool_calls);
  }

  /** Merges streamed tool-call pieces by index: id and name as given, arguments concatenated. */
  toolCalls(deltas: ToolCallDelta[]): void {
    for (const d of deltas) {
      let call = this.calls[d.index];
      if (!call) {
        call = this.calls[d.index] = { id: '', type: 'function', function: { name: '', arguments: '' } };
        this.blocks.push({ type: 'tool_call', call });
      }
      if (d.id) call.id = d.id;
      if (d.function?.name) call.function.name = d.function.name;
      if (d.function?.arguments) call.function.arguments += d.function.arguments;
    }
  }

  bodyPiece(piece: string): void {
    this.body += piece;
  }

  get content(): string {
    let s = '';
    for (const b of this.blocks) if (b.type === 'text') s += b.text;
    return s;
  }

  get reasoning(): string {
    let s = '';
    for (const b of this.blocks) if (b.type === 'reasoning') s += b.text;
    return s;
  }

  get toolCallList(): ToolCall[] {
    return this.calls.filter(Boolean);
  }

  get wholeBody(): string {
    return this.body;
  }
}
