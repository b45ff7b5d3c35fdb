import { describe, expect, it } from 'vitest';
import { SseParser } from './sse.ts';

describe('SseParser', () => {
  it('handles events split anywhere, CRLF, CR, comments and multi-line data', () => {
    const text = ': keep-alive\r\ndata: {"a":1}\r\n\r\ndata: {"b":\r\ndata: 2}\n\nevent: x\nid: 7\ndata:[DONE]\r\r';
    for (let cut = 0; cut <= text.length; cut++) {
      const p = new SseParser();
      const out = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut)), ...p.end()].map((e) => e.data);
      expect(out, `cut at ${cut}`).toEqual(['{"a":1}', '{"b":\n2}', '[DONE]']);
    }
    const p = new SseParser();
    const out: string[] = [];
    for (const ch of text) out.push(...p.push(ch).map((e) => e.data));
    expect([...out, ...p.end().map((e) => e.data)]).toEqual(['{"a":1}', '{"b":\n2}', '[DONE]']);
  });

  it('delivers a last event that lacks its blank line at end of body', () => {
    const p = new SseParser();
    expect([...p.push('data: x\n\ndata: [DONE]'), ...p.end()].map((e) => e.data)).toEqual(['x', '[DONE]']);
  });
});
