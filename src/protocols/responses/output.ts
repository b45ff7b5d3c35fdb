import type { ToolCallDelta } from '../../bus/messages.ts';
import { outputItemId } from './ids.ts';
import { type ClientTool, customInput } from './tools.ts';

// The output items of one response as the worker's frames build them, and the stream events that
// announce them, in OpenAI's order: an item is added, its pieces stream, it is done, then the next
// one starts. Text becomes a message item (one output_text part), reasoning a reasoning item with
// one summary part, each tool call a function_call (or custom_tool_call) item. Every event has its
// `type` and the next `sequence_number`. With `emit` off (an answer that is not streamed) the same
// items are built and no event is written, so the ids are the same either way.

type Item = Record<string, unknown>;

interface MessageState {
  kind: 'message';
  id: string;
  index: number;
  /** the text as JSON string contents (escapes kept), one piece per delta */
  parts: Buffer[];
  /** what follows the sequence number in this item's output_text.delta events */
  deltaHead: string;
}
interface ReasoningState {
  kind: 'reasoning';
  id: string;
  index: number;
  text: string;
}
interface CallState {
  kind: 'call';
  id: string;
  index: number;
  callId: string;
  chatName: string;
  args: string;
  tool?: ClientTool;
  done: boolean;
}
type Open = MessageState | ReasoningState | CallState;

const DELTA_PREFIX = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":';
const DELTA_SUFFIX = ',"logprobs":[]}\n\n';
const DELTA_SUFFIX_BYTES = Buffer.from(DELTA_SUFFIX);

const textOf = (parts: Buffer[]) => JSON.parse(`"${Buffer.concat(parts).toString('utf8')}"`) as string;
const textPart = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });

export class OutputItems {
  private seq = 0;
  /** finished items, by output index */
  readonly items: Item[] = [];
  private current: Open | null = null;
  /** tool calls by the vendor's call index */
  private readonly calls = new Map<number, CallState>();

  constructor(
    private readonly base: string,
    private readonly tools: Map<string, ClientTool>,
    private readonly emit: boolean,
  ) {}

  /** One SSE event: `event: <type>` and its JSON with `type` and `sequence_number` first. */
  event(type: string, fields: Record<string, unknown>): string {
    if (!this.emit) return '';
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`;
  }

  /** The same, for a field already serialised (one Response object written in two events is stringified once). */
  eventWithJson(type: string, field: string, json: string): string {
    if (!this.emit) return '';
    return `event: ${type}\ndata: {"type":${JSON.stringify(type)},"sequence_number":${this.seq++},${JSON.stringify(field)}:${json}}\n\n`;
  }

  /** The streaming hot path: `literal` is the JSON string literal of a text delta, copied as it is. */
  textLiteral(literal: Uint8Array): { lead: string; head: string } {
    const lead = this.message();
    const m = this.current as MessageState;
    m.parts.push(Buffer.from(literal.subarray(1, literal.length - 1)));
    return { lead, head: this.emit ? `${DELTA_PREFIX}${this.seq++}${m.deltaHead}` : '' };
  }

  static readonly deltaSuffix = DELTA_SUFFIX_BYTES;

  text(text: string): string {
    const literal = JSON.stringify(text);
    const lead = this.message();
    const m = this.current as MessageState;
    m.parts.push(Buffer.from(literal.slice(1, -1)));
    return this.emit ? `${lead}${DELTA_PREFIX}${this.seq++}${m.deltaHead}${literal}${DELTA_SUFFIX}` : '';
  }

  reasoning(text: string): string {
    let out = '';
    if (this.current?.kind !== 'reasoning') {
      out += this.closeCurrent();
      const index = this.items.length;
      const r: ReasoningState = { kind: 'reasoning', id: outputItemId(this.base, 'reasoning', index), index, text: '' };
      this.current = r;
      out += this.event('response.output_item.added', { output_index: index, item: { id: r.id, type: 'reasoning', summary: [] } });
      out += this.event('response.reasoning_summary_part.added', {
        item_id: r.id,
        output_index: index,
        summary_index: 0,
        part: { type: 'summary_text', text: '' },
      });
    }
    const r = this.current as ReasoningState;
    r.text += text;
    return out + this.event('response.reasoning_summary_text.delta', { item_id: r.id, output_index: r.index, summary_index: 0, delta: text });
  }

  /** One piece of a tool call (OpenAI's delta shape: a new index starts a call, arguments concatenate). */
  toolCall(d: ToolCallDelta): string {
    let call = this.calls.get(d.index);
    let out = '';
    if (!call) {
      out += this.closeCurrent();
      const index = this.items.length;
      const chatName = d.function?.name ?? '';
      const tool = this.tools.get(chatName);
      const type = tool?.custom ? 'custom_tool_call' : 'function_call';
      call = {
        kind: 'call',
        id: outputItemId(this.base, type, index),
        index,
        callId: d.id || `call_${this.base}_${index}`,
        chatName,
        args: '',
        tool,
        done: false,
      };
      this.calls.set(d.index, call);
      this.current = call;
      out += this.event('response.output_item.added', { output_index: index, item: this.callItem(call, 'in_progress', '') });
    }
    const piece = d.function?.arguments ?? '';
    if (!piece) return out;
    call.args += piece;
    if (call.done) {
      this.items[call.index] = this.callItem(call, 'completed', call.args); // a late piece: the answer gets it, the stream already ended the item
      return out;
    }
    if (call.tool?.custom) return out; // its input is one string inside the arguments' JSON: sent whole when the call is done
    return out + this.event('response.function_call_arguments.delta', { item_id: call.id, output_index: call.index, delta: piece });
  }

  /** Ends the item being built: its done events, and its final form in `items`. */
  closeCurrent(status: 'completed' | 'incomplete' = 'completed'): string {
    const c = this.current;
    if (!c) return '';
    this.current = null;
    if (c.kind === 'message') return this.closeMessage(c, status);
    if (c.kind === 'reasoning') return this.closeReasoning(c);
    return this.closeCall(c, status);
  }

  private message(): string {
    if (this.current?.kind === 'message') return '';
    let out = this.closeCurrent();
    const index = this.items.length;
    const id = outputItemId(this.base, 'message', index);
    this.current = { kind: 'message', id, index, parts: [], deltaHead: `,"item_id":"${id}","output_index":${index},"content_index":0,"delta":` };
    out += this.event('response.output_item.added', {
      output_index: index,
      item: { id, type: 'message', status: 'in_progress', role: 'assistant', content: [] },
    });
    out += this.event('response.content_part.added', { item_id: id, output_index: index, content_index: 0, part: textPart('') });
    return out;
  }

  private closeMessage(m: MessageState, status: 'completed' | 'incomplete'): string {
    const text = textOf(m.parts);
    const item = { id: m.id, type: 'message', status, role: 'assistant', content: [textPart(text)] };
    this.items[m.index] = item;
    const at = { item_id: m.id, output_index: m.index, content_index: 0 };
    return (
      this.event('response.output_text.done', { ...at, text, logprobs: [] }) +
      this.event('response.content_part.done', { ...at, part: textPart(text) }) +
      this.event('response.output_item.done', { output_index: m.index, item })
    );
  }

  private closeReasoning(r: ReasoningState): string {
    const part = { type: 'summary_text', text: r.text };
    const item = { id: r.id, type: 'reasoning', summary: [part] };
    this.items[r.index] = item;
    const at = { item_id: r.id, output_index: r.index, summary_index: 0 };
    return (
      this.event('response.reasoning_summary_text.done', { ...at, text: r.text }) +
      this.event('response.reasoning_summary_part.done', { ...at, part }) +
      this.event('response.output_item.done', { output_index: r.index, item })
    );
  }

  private closeCall(c: CallState, status: 'completed' | 'incomplete'): string {
    c.done = true;
    const item = this.callItem(c, status, c.args);
    this.items[c.index] = item;
    const at = { item_id: c.id, output_index: c.index };
    const done = c.tool?.custom
      ? this.event('response.custom_tool_call_input.delta', { ...at, delta: item.input }) +
        this.event('response.custom_tool_call_input.done', { ...at, input: item.input })
      : this.event('response.function_call_arguments.done', { ...at, name: item.name, arguments: c.args });
    return done + this.event('response.output_item.done', { output_index: c.index, item });
  }

  /** A call item with the client's own tool name (and namespace); a custom tool's call carries its input. */
  private callItem(c: CallState, status: string, args: string): Item {
    const name = c.tool?.name ?? c.chatName;
    const namespace = c.tool?.namespace ? { namespace: c.tool.namespace } : {};
    if (c.tool?.custom) return { id: c.id, type: 'custom_tool_call', status, call_id: c.callId, name, ...namespace, input: args ? customInput(args) : '' };
    return { id: c.id, type: 'function_call', status, call_id: c.callId, name, ...namespace, arguments: args };
  }
}
