import { describe, expect, it } from 'vitest';
// @ts-expect-error plain JS module shared with k6
import { parseStream } from './sse.js';

describe('k6 parseStream', () => {
  it('counts content chunks and sees [DONE]', () => {
    const body =
      ': processing\n\n' +
      'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n' +
      'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n' +
      'data: {"choices":[{"index":0,"delta":{"content":" world"}}]}\r\n\r\n' +
      'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' +
      'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"cost":0.000007}}\n\n' +
      'data: [DONE]\n\n';
    expect(parseStream(body)).toEqual({ content: 2, done: true, error: false });
  });
  it('flags a mid-stream error event and a cut stream', () => {
    expect(
      parseStream(
        'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"error":{"message":"upstream failed","code":502},"choices":[{"delta":{"content":""},"finish_reason":"error"}]}\n\ndata: [DONE]\n\n',
      ),
    ).toEqual({ content: 1, done: true, error: true });
    expect(parseStream('data: {"choices":[{"delta":{"content":"a"}}]}\n\n')).toEqual({ content: 1, done: false, error: false });
  });
});
