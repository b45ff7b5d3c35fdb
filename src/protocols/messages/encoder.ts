import type { ExtendedDelta } from '../../bus/frames.ts';
import type { ToolCallDelta } from '../../bus/messages.ts';
import type { CatracaError } from '../../errors.ts';
import type { Block, Collected } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';
import { validToolId } from './tool-ids.ts';
import { anthropicUsage, errorObject, stopReason } from './wire.ts';

// Anthropic's Messages answer: the SSE events of a stream (message_start, content_block_start /
// _delta / _stop, message_delta, message_stop, ping, error) built as strings, the per-token text
// delta as bytes around the worker's JSON string literal; or the whole Message object.
//
// Content blocks are numbered in the order they open. A block opens only when its content arrives
// (no empty leading text block); a thinking block ends with its signature; reasoning from a vendor
// that signs nothing (OpenAI-compatible ones) is a thinking block whose signature is "" (clients
// show it; we drop it before an Anthropic vendor sees it again). A tool call opens a tool_use block
// with `input: {}` and its arguments follow as input_json_delta pieces.
//
// One text, thinking or redacted block is open at a time (the next block closes it). tool_use
// blocks stay open until the message ends, then close in index order with any other open block:
// an OpenAI-compatible vendor may interleave the argument pieces of parallel calls (call 0, call 1,
// call 0 again), and no input_json_delta may go to a block already closed.

const event = (type: string, data: string) => `event: ${type}\ndata: ${data}\n\n`;

type OpenBlock = { kind: 'text' | 'thinking' | 'redacted'; index: number; signed?: boolean };

/** The id of a tool call as Anthropic clients may send it back (a vendor's id made valid, or one of ours when it gave none). */
const toolUseId = (id: string | undefined, requestId: string, index: number) => validToolId(id || `toolu_${requestId}_${index}`);

export class MessagesEncoder implements ResponseEncoder {
  private next = 0;
  /** the open text, thinking or redacted block */
  private current: OpenBlock | null = null;
  /** tool call index (OpenAI's) → its block index; every one stays open until close() */
  private readonly toolBlocks = new Map<number, number>();
  private textPrefix?: Buffer;
  private static readonly textSuffix = Buffer.from('}}\n\n');

  constructor(private readonly ctx: EncoderContext) {}

  open(): string {
    const message = {
      id: this.ctx.requestId,
      type: 'message',
      role: 'assistant',
      model: this.ctx.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      // the prompt's count is known when the vendor finishes: message_delta carries the totals
      usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    };
    return event('message_start', JSON.stringify({ type: 'message_start', message }));
  }

  text(literal: Uint8Array): string | Uint8Array {
    const start = this.current?.kind === 'text' ? '' : this.start('text', '{"type":"text","text":""}');
    this.textPrefix ??= Buffer.from(
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":${this.current!.index},"delta":{"type":"text_delta","text":`,
    );
    const delta = Buffer.concat([this.textPrefix, literal, MessagesEncoder.textSuffix]);
    return start ? Buffer.concat([Buffer.from(start), delta]) : delta;
  }

  delta(d: ExtendedDelta): string {
    let out = '';
    if (d.reasoning) {
      if (this.current?.kind !== 'thinking' || this.current.signed) out += this.start('thinking', '{"type":"thinking","thinking":"","signature":""}');
      out += this.blockDelta({ type: 'thinking_delta', thinking: d.reasoning });
    }
    if (d.reasoning_signature !== undefined) {
      if (this.current?.kind !== 'thinking' || this.current.signed) out += this.start('thinking', '{"type":"thinking","thinking":"","signature":""}');
      out += this.blockDelta({ type: 'signature_delta', signature: d.reasoning_signature });
      this.current!.signed = true;
    }
    if (d.redacted_reasoning !== undefined) out += this.start('redacted', JSON.stringify({ type: 'redacted_thinking', data: d.redacted_reasoning }));
    if (d.content) {
      if (this.current?.kind !== 'text') out += this.start('text', '{"type":"text","text":""}');
      out += this.blockDelta({ type: 'text_delta', text: d.content });
    }
    if (d.tool_calls) for (const piece of d.tool_calls) out += this.toolPiece(piece);
    return out;
  }

  keepalive(): string {
    return event('ping', '{"type":"ping"}');
  }

  close(end: Ending): string {
    const delta = { type: 'message_delta', delta: stopReason(end.finishReason, end.stopSequence), usage: anthropicUsage(end.usage) };
    return `${this.stopAll()}${event('message_delta', JSON.stringify(delta))}${event('message_stop', '{"type":"message_stop"}')}`;
  }

  fail(e: CatracaError): string {
    return event('error', JSON.stringify(errorObject(e)));
  }

  body(out: Collected, end: Ending) {
    return {
      id: this.ctx.requestId,
      type: 'message',
      role: 'assistant',
      model: this.ctx.model,
      content: out.blocks.map((b, i) => contentBlock(b, this.ctx.requestId, i)),
      ...stopReason(end.finishReason, end.stopSequence),
      usage: anthropicUsage(end.usage),
    };
  }

  private toolPiece(piece: ToolCallDelta): string {
    let out = '';
    let index = this.toolBlocks.get(piece.index);
    if (index === undefined) {
      const id = toolUseId(piece.id, this.ctx.requestId, piece.index);
      out += this.stop();
      index = this.next++;
      this.toolBlocks.set(piece.index, index);
      const block = JSON.stringify({ type: 'tool_use', id, name: piece.function?.name ?? '', input: {} });
      out += event('content_block_start', `{"type":"content_block_start","index":${index},"content_block":${block}}`);
    }
    const args = piece.function?.arguments;
    // the call's block is still open (tool blocks close at the end), even when the vendor
    // interleaves the pieces of parallel calls
    if (args)
      out += event('content_block_delta', JSON.stringify({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: args } }));
    return out;
  }

  /** Closes the open text, thinking or redacted block and opens the next one (tool_use blocks stay open). */
  private start(kind: OpenBlock['kind'], contentBlock: string): string {
    const stop = this.stop();
    const index = this.next++;
    this.current = { kind, index };
    if (kind === 'text') this.textPrefix = undefined;
    return `${stop}${event('content_block_start', `{"type":"content_block_start","index":${index},"content_block":${contentBlock}}`)}`;
  }

  private stop(): string {
    if (!this.current) return '';
    const index = this.current.index;
    this.current = null;
    return event('content_block_stop', `{"type":"content_block_stop","index":${index}}`);
  }

  /** The end of the message: every block still open closed, in index order. */
  private stopAll(): string {
    const open = [...this.toolBlocks.values()];
    if (this.current) open.push(this.current.index);
    this.current = null;
    this.toolBlocks.clear();
    return open
      .sort((a, b) => a - b)
      .map((index) => event('content_block_stop', `{"type":"content_block_stop","index":${index}}`))
      .join('');
  }

  private blockDelta(delta: Record<string, unknown>): string {
    return event('content_block_delta', JSON.stringify({ type: 'content_block_delta', index: this.current!.index, delta }));
  }
}

/** Tool arguments as the object Anthropic's `input` is; arguments a vendor cut short stay a string rather than be lost. */
function toolInput(args: string): unknown {
  if (!args) return {};
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

function contentBlock(b: Block, requestId: string, index: number): Record<string, unknown> {
  switch (b.type) {
    case 'text':
      return { type: 'text', text: b.text };
    case 'reasoning':
      return { type: 'thinking', thinking: b.text, signature: b.signature ?? '' };
    case 'redacted_reasoning':
      return { type: 'redacted_thinking', data: b.data };
    case 'tool_call':
      return { type: 'tool_use', id: toolUseId(b.call.id, requestId, index), name: b.call.function.name, input: toolInput(b.call.function.arguments) };
  }
}
