import { describe, expect, it } from 'vitest';
import { parseResultLines, resultOf, usageOfBody } from './batch.ts';

// Mapping a vendor's batch results back, line by line (docs/batch.md "vendor mode").
describe('OpenAI batch results', () => {
  it('reads an output line: its custom_id, status and body', () => {
    const line = {
      id: 'batch_req_1',
      custom_id: 'l3',
      response: { status_code: 200, request_id: 'req_x', body: { id: 'chatcmpl-1', usage: { prompt_tokens: 7, completion_tokens: 4 } } },
      error: null,
    };
    expect(resultOf(line)).toEqual({ custom_id: 'l3', status_code: 200, body: line.response.body, error: null });
  });

  it('reads an error line: a vendor error answer, or an error without a response', () => {
    expect(resultOf({ custom_id: 'l0', response: { status_code: 400, body: { error: { message: 'bad' } } }, error: null })).toEqual({
      custom_id: 'l0',
      status_code: 400,
      body: { error: { message: 'bad' } },
      error: null,
    });
    expect(resultOf({ custom_id: 'l1', response: null, error: { code: 'batch_expired', message: 'expired' } })).toEqual({
      custom_id: 'l1',
      status_code: null,
      body: null,
      error: { code: 'batch_expired', message: 'expired' },
    });
    expect(resultOf({ response: null })).toBeNull();
  });

  it('parses JSONL, skipping blank and broken lines', () => {
    expect(parseResultLines('{"a":1}\r\n\nnot json\n{"b":2}\n')).toEqual([{ a: 1 }, { b: 2 }]);
  });

  it("takes a line's usage in OpenAI's convention: cached and reasoning parts when reported", () => {
    expect(
      usageOfBody({
        usage: { prompt_tokens: 100, completion_tokens: 20, prompt_tokens_details: { cached_tokens: 50 }, completion_tokens_details: { reasoning_tokens: 5 } },
      }),
    ).toEqual({ prompt_tokens: 100, completion_tokens: 20, cached_tokens: 50, reasoning_tokens: 5 });
    expect(usageOfBody({ usage: { prompt_tokens: 9, completion_tokens: 0, prompt_tokens_details: { cached_tokens: 0 } } })).toEqual({
      prompt_tokens: 9,
      completion_tokens: 0,
    });
    // the Responses API's names, embeddings' (no output)
    expect(usageOfBody({ usage: { input_tokens: 12, output_tokens: 3 } })).toEqual({ prompt_tokens: 12, completion_tokens: 3 });
    expect(usageOfBody({ usage: { prompt_tokens: 6, total_tokens: 6 } })).toEqual({ prompt_tokens: 6, completion_tokens: 0 });
    expect(usageOfBody({ id: 'x' })).toBeNull();
    expect(usageOfBody({ usage: { prompt_tokens: -1 } })).toBeNull();
  });
});
