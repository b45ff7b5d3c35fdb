import { describe, expect, it } from 'vitest';
import { classifyChunk, classifyGeminiEvent, classifyMessagesEvent, classifyResponsesEvent, SseParser } from './sse.ts';

describe('SseParser', () => {
  it('parses data events, comments and [DONE]', () => {
    const p = new SseParser();
    expect(p.push(': processing\n\ndata: {"a":1}\n\ndata: [DONE]\n\n')).toEqual([
      { event: 'message', data: '{"a":1}' },
      { event: 'message', data: '[DONE]' },
    ]);
    expect(p.comments).toBe(1);
  });

  it('reassembles events split at any byte, with \\r\\n split across chunks', () => {
    const text = 'data: one\r\n\r\nevent: x\r\nid: 7\r\ndata: two\r\ndata:three\r\n\r\n';
    for (let cut = 0; cut <= text.length; cut++) {
      const p = new SseParser();
      const got = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut))];
      expect(got).toEqual([
        { event: 'message', data: 'one' },
        { event: 'x', data: 'two\nthree', id: '7' },
      ]);
    }
  });

  it('accepts bare \\r line endings and ignores unknown fields and data-less blocks', () => {
    const p = new SseParser();
    expect(p.push('retry: 5\r\rdata: a\r\rfoo: bar\ndata\n\n')).toEqual([
      { event: 'message', data: 'a' },
      { event: 'message', data: '' },
    ]);
  });

  it('keeps an unterminated event until its blank line', () => {
    const p = new SseParser();
    expect(p.push('data: {"x"')).toEqual([]);
    expect(p.push(':1}\n')).toEqual([]);
    expect(p.push('\n')).toEqual([{ event: 'message', data: '{"x":1}' }]);
  });
});

describe('classifyChunk', () => {
  it('tells content, empty, done, error and invalid apart', () => {
    expect(classifyChunk('{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}')).toBe('empty');
    expect(classifyChunk('{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}')).toBe('content');
    expect(classifyChunk('{"choices":[{"delta":{"content": " there"}}]}')).toBe('content');
    expect(classifyChunk('{"choices":[{"delta":{"content":null}}]}')).toBe('empty');
    expect(classifyChunk('{"choices":[{"delta":{},"finish_reason":"stop"}]}')).toBe('empty');
    expect(classifyChunk('{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}')).toBe('empty');
    expect(classifyChunk('[DONE]')).toBe('done');
    expect(classifyChunk('{"error":{"message":"upstream failed","code":502},"choices":[{"delta":{"content":""},"finish_reason":"error"}]}')).toBe('error');
    expect(classifyChunk('{"choices":[{"delta":{"content":"the word \\"error\\" is fine"}}]}')).toBe('content');
    expect(classifyChunk('hello')).toBe('invalid');
  });
});

describe('classifyResponsesEvent', () => {
  it('counts POST /v1/responses events by name', () => {
    expect(classifyResponsesEvent('response.output_text.delta')).toBe('content');
    expect(classifyResponsesEvent('response.completed')).toBe('done');
    expect(classifyResponsesEvent('response.incomplete')).toBe('done');
    expect(classifyResponsesEvent('response.failed')).toBe('error');
    expect(classifyResponsesEvent('error')).toBe('error');
    expect(classifyResponsesEvent('response.created')).toBe('empty');
    expect(classifyResponsesEvent('message')).toBe('invalid');
  });
});

describe('classifyMessagesEvent', () => {
  it('text deltas are content, message_stop the end, error an error', () => {
    expect(classifyMessagesEvent('content_block_delta', '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}')).toBe('content');
    expect(classifyMessagesEvent('content_block_delta', '{"delta":{"type":"input_json_delta","partial_json":"{"}}')).toBe('empty');
    expect(classifyMessagesEvent('message_start', '{}')).toBe('empty');
    expect(classifyMessagesEvent('ping', '{}')).toBe('empty');
    expect(classifyMessagesEvent('message_stop', '{}')).toBe('done');
    expect(classifyMessagesEvent('error', '{}')).toBe('error');
    expect(classifyMessagesEvent('message', '{}')).toBe('invalid');
  });
});

describe('classifyGeminiEvent', () => {
  it('tells a text piece, the last event, an error and an empty piece apart', () => {
    expect(classifyGeminiEvent('{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}')).toBe('content');
    expect(classifyGeminiEvent('{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}]}')).toBe('done');
    expect(classifyGeminiEvent('{"error":{"code":503,"message":"x","status":"UNAVAILABLE"}}')).toBe('error');
    expect(classifyGeminiEvent('{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"index":0}]}')).toBe('empty');
  });
});
