import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchEnded, expectBatchBilled, fileLines } from './helpers/batches.ts';
import { SIM_PRICES, startStack, type TestStack } from './helpers/stack.ts';

// A queue-mode batch line refused for a reason that passes with time (its key's concurrency or
// request-rate limit) is not an error line: it goes back to the queue and runs again later, and the
// batch ends with every line answered, each billed once. A refusal the same line would always meet
// (one request over the key's tokens-per-minute limit) is its answer at once.

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4' } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

interface ResultLine {
  custom_id: string;
  response: {
    status_code: number;
    request_id: string;
    body: { usage?: { prompt_tokens: number; completion_tokens: number }; error?: { code: string } };
  } | null;
  error: { code: string } | null;
}

/** `n` chat lines of sim/echo, each answered after `firstTokenMs`. */
async function runBatch(client: OpenAI, n: number, firstTokenMs: number) {
  const lines = Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      custom_id: `req-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'sim/echo', max_tokens: 16, messages: [{ role: 'user', content: `hello number ${i}` }], sim: { first_token_ms: firstTokenMs } },
    }),
  );
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

/** Every line answered 200, debited once exactly its usage at sim/echo's prices, under its batch; balance = ledger. */
async function expectEachBilledOnce(tenantId: string, granted: bigint, batchId: string, output: ResultLine[]) {
  expect(new Set(output.map((l) => l.response!.request_id)).size).toBe(output.length);
  await expectBatchBilled(stack, tenantId, granted, batchId, output, SIM_PRICES.echo);
}

describe('batch lines refused for a while run again', () => {
  it('a key with max_concurrent 1: the lines its limit refuses (429) run later, none an error line, each billed once', async () => {
    const t = await stack.tenant('10', { maxConcurrent: 1 });
    const client = clientOf(t.key);
    // four runner slots, one request of the key at a time, each line answered after 300 ms
    const created = await runBatch(client, 8, 300);
    const ended = await batchEnded(client, created.id, 60_000);
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: 8, completed: 8, failed: 0 });
    expect(ended.error_file_id).toBeNull();
    const output = await fileLines<ResultLine>(client, ended.output_file_id);
    expect(output.map((l) => [l.custom_id, l.response?.status_code]).sort()).toEqual(Array.from({ length: 8 }, (_, i) => [`req-${i}`, 200]).sort());
    await expectEachBilledOnce(t.tenantId, 10_000_000n, created.id, output);
    const { rows } = await stack.db.query('select count(*)::int as n from batch_results where batch_id = $1', [created.id]);
    expect(rows[0].n).toBe(8);
  }, 90_000);

  it('a key allowed 2 requests every 2 s: the lines over its rate run after its retry-after, each billed once', async () => {
    const t = await stack.tenant('10', { rateLimitRequests: 2, rateLimitIntervalS: 2 });
    const client = clientOf(t.key);
    const created = await runBatch(client, 6, 0);
    const ended = await batchEnded(client, created.id, 60_000);
    expect(ended.request_counts).toEqual({ total: 6, completed: 6, failed: 0 });
    expect(ended.error_file_id).toBeNull();
    const output = await fileLines<ResultLine>(client, ended.output_file_id);
    expect(output.every((l) => l.response?.status_code === 200)).toBe(true);
    await expectEachBilledOnce(t.tenantId, 10_000_000n, created.id, output);
    // three windows at least: 2 + 2 + 2 lines, 2 s apart
    expect((ended.completed_at! - ended.in_progress_at!) * 1000).toBeGreaterThanOrEqual(2000);
  }, 90_000);

  it("a line over the key's tokens per minute on its own is its 429 at once (it never fits), nothing charged", async () => {
    // each line counts its prompt estimate and max_tokens 16: more than 10
    const t = await stack.tenant('10', { tpm: 10 });
    const client = clientOf(t.key);
    const created = await runBatch(client, 3, 0);
    const ended = await batchEnded(client, created.id, 30_000);
    expect(ended.request_counts).toEqual({ total: 3, completed: 0, failed: 3 });
    const failed = await fileLines<ResultLine>(client, ended.error_file_id);
    expect(failed.map((l) => [l.response?.status_code, l.response?.body.error?.code])).toEqual([
      [429, 'tpm_limit_exceeded'],
      [429, 'tpm_limit_exceeded'],
      [429, 'tpm_limit_exceeded'],
    ]);
    await stack.waitNoHolds(t.tenantId, 10_000);
    const { rows } = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId]);
    expect(rows[0].n).toBe(0);
  }, 60_000);
});
