import { expect, it } from 'vitest';
import { type BatchRow, batchObject, newBatchId } from './batches.ts';
import { resultLine } from './runner.ts';

const at = (s: number) => new Date(s * 1000);

it("a batch row as OpenAI's Batch object", () => {
  const row: BatchRow = {
    id: 'batch_0000000000010000000000ff',
    tenant_id: 't1',
    key_id: 'k1',
    input_file_id: 'file-1',
    endpoint: '/v1/embeddings',
    completion_window: '24h',
    metadata: { a: 'b' },
    status: 'completed',
    api: 'openai',
    total: 3,
    completed: 2,
    failed: 1,
    output_file_id: 'file-2',
    error_file_id: 'file-3',
    created_at: at(1000),
    in_progress_at: at(1001),
    finalizing_at: at(1010),
    completed_at: at(1010),
    cancelling_at: null,
    cancelled_at: null,
    expired_at: null,
    expires_at: at(1000 + 86400),
    model: 'sim/embed',
    output_expires_seconds: null,
    out_of_balance_at: null,
    out_of_balance_line: null,
  };
  const usage = {
    input_tokens: 30,
    input_tokens_details: { cached_tokens: 4 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 30,
  };
  expect(batchObject(row, usage)).toEqual({
    id: row.id,
    object: 'batch',
    endpoint: '/v1/embeddings',
    model: 'sim/embed',
    errors: null,
    input_file_id: 'file-1',
    completion_window: '24h',
    status: 'completed',
    output_file_id: 'file-2',
    error_file_id: 'file-3',
    created_at: 1000,
    in_progress_at: 1001,
    expires_at: 87400,
    finalizing_at: 1010,
    completed_at: 1010,
    failed_at: null,
    expired_at: null,
    cancelling_at: null,
    cancelled_at: null,
    request_counts: { total: 3, completed: 2, failed: 1 },
    usage,
    metadata: { a: 'b' },
  });
  // a batch none of whose lines was billed yet
  expect(batchObject({ ...row, model: null }).usage).toEqual({
    input_tokens: 0,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 0,
  });
  expect(newBatchId(0x10)).toMatch(/^batch_000000000010[0-9a-f]{12}$/);
});

it("result rows as lines of OpenAI's output and error files", () => {
  const base = { batch_id: 'batch_abc', custom_id: 'req-7', line: 6 };
  expect(JSON.parse(resultLine({ ...base, request_id: 'gen-1', status_code: 200, body: { ok: 1 }, error: null, ok: true }))).toEqual({
    id: 'batch_req_abc_7',
    custom_id: 'req-7',
    response: { status_code: 200, request_id: 'gen-1', body: { ok: 1 } },
    error: null,
  });
  const cancelled = { code: 'batch_cancelled', message: 'm' };
  expect(JSON.parse(resultLine({ ...base, request_id: null, status_code: null, body: null, error: cancelled, ok: false }))).toEqual({
    id: 'batch_req_abc_7',
    custom_id: 'req-7',
    response: null,
    error: cancelled,
  });
});
