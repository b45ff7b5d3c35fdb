import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { findBatch, parseResultLines, resultOf, usageOfBody } from './batch.ts';

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

// The look-up of a chunk submitted before (src/runner/vendor-batch.ts): GET /batches, newest first,
// page after page (`after` = the last id), down to `since`.
describe('findBatch', () => {
  /** A vendor with batches b9 (newest, created at 1 009) … b0 (1 000), listed 3 a page whatever the limit; the pages asked for. */
  async function vendor(): Promise<{ url: string; asked: string[]; close: () => Promise<void> }> {
    const all = Array.from({ length: 10 }, (_, i) => ({
      id: `b${9 - i}`,
      status: 'in_progress',
      created_at: 1009 - i,
      metadata: { catraca_chunk: `c${9 - i}` },
    }));
    const asked: string[] = [];
    const server = http.createServer((req, res) => {
      const q = new URL(req.url ?? '/', 'http://x').searchParams;
      asked.push(`${req.headers.authorization} ${q.get('limit')} ${q.get('after') ?? '-'}`);
      const from = q.has('after') ? all.findIndex((b) => b.id === q.get('after')) + 1 : 0;
      const data = all.slice(from, from + 3);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: from + 3 < all.length }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
      asked,
      close: () => new Promise((r) => server.close(() => r())),
    };
  }

  it('pages through the batches until one carries the metadata', async () => {
    const v = await vendor();
    try {
      expect((await findBatch(v.url, 'sk-x', { key: 'catraca_chunk', value: 'c4', since: 0 }))?.id).toBe('b4');
      expect(v.asked).toEqual(['Bearer sk-x 100 -', 'Bearer sk-x 100 b7']);
    } finally {
      await v.close();
    }
  });

  it('stops at the first page reaching back past `since`, or at the last page, or after `pages`: null', async () => {
    const v = await vendor();
    try {
      // b3 (1 003) is older than since: the page ending with b4 (1 004) is the last read
      expect(await findBatch(v.url, null, { key: 'catraca_chunk', value: 'c3', since: 1005 })).toBeNull();
      expect(v.asked).toEqual(['undefined 100 -', 'undefined 100 b7']);
      v.asked.length = 0;
      expect(await findBatch(v.url, null, { key: 'catraca_chunk', value: 'none', since: 0 })).toBeNull();
      expect(v.asked).toEqual(['undefined 100 -', 'undefined 100 b7', 'undefined 100 b4', 'undefined 100 b1']);
      v.asked.length = 0;
      expect(await findBatch(v.url, null, { key: 'catraca_chunk', value: 'c0', since: 0 }, 2)).toBeNull();
      expect(v.asked).toEqual(['undefined 100 -', 'undefined 100 b7']);
    } finally {
      await v.close();
    }
  });
});
