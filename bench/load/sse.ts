// Incremental Server-Sent Events parser (the subset of the WHATWG algorithm an OpenAI stream
// uses): lines end in \n, \r\n or \r; `data:` lines accumulate (joined by \n) until a blank line
// dispatches the event; `:` starts a comment; `event:`/`id:` are kept; one optional space
// after the colon is dropped. Chunks may split anywhere, including inside a \r\n pair.

export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

export class SseParser {
  private buf = '';
  private data: string[] = [];
  private event = '';
  private id: string | undefined;
  private hasData = false;
  private lastWasCR = false;
  comments = 0;

  /** Feeds decoded text; returns the events completed by it. */
  push(chunk: string): SseEvent[] {
    const out: SseEvent[] = [];
    let text = chunk;
    if (this.lastWasCR && text.startsWith('\n')) text = text.slice(1); // \r\n split across chunks
    this.lastWasCR = false;
    this.buf += text;
    let start = 0;
    const b = this.buf;
    for (let i = 0; i < b.length; i++) {
      const c = b.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.line(b.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < b.length) {
          if (b.charCodeAt(i + 1) === 10) i++;
        } else this.lastWasCR = true;
      }
      start = i + 1;
    }
    this.buf = b.slice(start);
    return out;
  }

  private line(line: string, out: SseEvent[]): void {
    if (line.length === 0) {
      if (this.hasData) out.push({ event: this.event || 'message', data: this.data.join('\n'), ...(this.id !== undefined ? { id: this.id } : {}) });
      this.data = [];
      this.hasData = false;
      this.event = '';
      return;
    }
    if (line.charCodeAt(0) === 58 /* : */) {
      this.comments++;
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') {
      this.data.push(value);
      this.hasData = true;
    } else if (field === 'event') this.event = value;
    else if (field === 'id') this.id = value;
  }
}

export type ChunkKind = 'content' | 'empty' | 'done' | 'error' | 'invalid';

/**
 * Classifies one OpenAI stream `data:` payload cheaply, without JSON.parse on the hot path:
 * `[DONE]`; a chunk with non-empty `delta.content` ("content"); an error event (`{"error":…}`,
 * OpenRouter's mid-stream failure); anything else that looks like JSON ("empty": the role
 * chunk, finish chunk, usage chunk). Error payloads are parsed to be sure.
 */
export function classifyChunk(data: string): ChunkKind {
  if (data === '[DONE]') return 'done';
  if (data.charCodeAt(0) !== 123 /* { */) return 'invalid';
  if (data.includes('"error"')) {
    try {
      const v = JSON.parse(data) as { error?: unknown };
      if (v && typeof v === 'object' && v.error) return 'error';
    } catch {
      return 'invalid';
    }
  }
  let i = data.indexOf('"content":');
  while (i !== -1) {
    let j = i + 10;
    while (data.charCodeAt(j) === 32) j++;
    // a string value that is not empty: "content":"x…
    if (data.charCodeAt(j) === 34 && data.charCodeAt(j + 1) !== 34) return 'content';
    i = data.indexOf('"content":', j);
  }
  return 'empty';
}
