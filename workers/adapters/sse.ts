// Incremental parser of a server-sent-events body: feed decoded text as it arrives (events may be
// split anywhere, lines end in \n, \r\n or \r), get back the `data` payload of each complete event.
// Comment lines (": ...") and other fields (event, id, retry) are ignored.
export class SseParser {
  private buf = '';
  private data: string[] = [];

  push(text: string): string[] {
    this.buf += text;
    const out: string[] = [];
    let start = 0;
    const buf = this.buf;
    for (;;) {
      let i = start;
      while (i < buf.length && buf.charCodeAt(i) !== 10 && buf.charCodeAt(i) !== 13) i++;
      if (i >= buf.length) break;
      // A lone \r at the very end may be the first half of \r\n: wait for more.
      if (buf.charCodeAt(i) === 13 && i + 1 >= buf.length) break;
      this.line(buf.slice(start, i), out);
      start = buf.charCodeAt(i) === 13 && buf.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
    }
    this.buf = start > 0 ? buf.slice(start) : buf;
    return out;
  }

  /** End of body: a last line or event without its terminating blank line is still delivered. */
  end(): string[] {
    const out: string[] = [];
    if (this.buf.length > 0) this.line(this.buf.replace(/\r$/, ''), out);
    this.buf = '';
    if (this.data.length > 0) out.push(this.data.join('\n'));
    this.data = [];
    return out;
  }

  private line(line: string, out: string[]): void {
    if (line.length === 0) {
      if (this.data.length > 0) out.push(this.data.join('\n'));
      this.data = [];
      return;
    }
    if (line.charCodeAt(0) === 58 /* : */) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    this.data.push(value);
  }
}
