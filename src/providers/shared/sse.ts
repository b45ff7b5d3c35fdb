// Incremental Server-Sent Events parser (the subset of the WHATWG algorithm vendor streams use),
// shared by the workers (reading vendors) and the load runner (reading catraca): lines end in \n,
// \r\n or \r; `data:` lines accumulate (joined by \n) until a blank line dispatches the event; `:`
// starts a comment; `event:`/`id:` are kept; one optional space after the colon is dropped.
// Chunks may split anywhere, including inside a \r\n pair. `end()` delivers a last event that
// lacks its blank line when the body ends.

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

  /** End of body: a last line or event without its terminating blank line is still delivered. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    if (this.buf.length > 0) this.line(this.buf, out);
    this.buf = '';
    this.line('', out);
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
