import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';

// The Batch object's fields beyond the first cut, with the real `openai` SDK: `model` (the model
// every line names), `usage` (the tokens of the lines billed, summed from their ledger debits, also
// on the list and on cancel) and `output_expires_after` (how long the output and error files live).

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4', BATCH_RETENTION_DAYS: '7' } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

const chatLine = (i: number, model = 'sim/echo') =>
  JSON.stringify({
    custom_id: `u-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, max_tokens: 12, messages: [{ role: 'user', content: `count the words of line ${i} please` }] },
  });

async function upload(client: OpenAI, lines: string[]) {
  return client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
}

async function waitEnded(client: OpenAI, id: string) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${id} still ${b.status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('Batch object: model, usage, output_expires_after', () => {
  it('usage is the sum of the lines’ debits; model the lines’ model; the output file expires when asked', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const file = await upload(
      client,
      Array.from({ length: 12 }, (_, i) => chatLine(i)),
    );
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      output_expires_after: { anchor: 'created_at', seconds: 3600 },
    });
    expect(batch.model).toBe('sim/echo');
    expect(batch.usage).toEqual({
      input_tokens: 0,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 0,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 0,
    });
    const ended = await waitEnded(client, batch.id);
    expect(ended.request_counts).toEqual({ total: 12, completed: 12, failed: 0 });
    const text = await (await client.files.content(ended.output_file_id as string)).text();
    const answers = text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l).response);
    await stack.waitSettled(
      answers.map((a) => a.request_id),
      20_000,
    );
    // the answers' own usage, summed, is what the ledger debited and what the batch reports
    const input = answers.reduce((n, a) => n + a.body.usage.prompt_tokens, 0);
    const output = answers.reduce((n, a) => n + a.body.usage.completion_tokens, 0);
    const { rows } = await stack.db.query(
      "select sum(input_tokens)::int as i, sum(output_tokens)::int as o from ledger where batch_id = $1 and kind = 'debit' and tenant_id = $2",
      [batch.id, t.tenantId],
    );
    expect(rows[0]).toEqual({ i: input, o: output });
    const again = await client.batches.retrieve(batch.id);
    expect(again.usage).toEqual({
      input_tokens: input,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: input + output,
    });
    const listed = await client.batches.list({ limit: 5 });
    expect(listed.data.find((b) => b.id === batch.id)?.usage).toEqual(again.usage);
    // output_expires_after: one hour from the output file's creation, not BATCH_RETENTION_DAYS
    const out = await client.files.retrieve(ended.output_file_id as string);
    expect((out.expires_at as number) - out.created_at).toBe(3600);
    // the input file keeps the retention period (BATCH_RETENTION_DAYS, 7 here)
    expect((file.expires_at as number) - file.created_at).toBe(7 * 86400);
  }, 60_000);

  it("files.create's expires_after: shorter than the retention period is kept; longer is capped at it", async () => {
    const t = await stack.tenant('1');
    const client = clientOf(t.key);
    const body = async () => toFile(Buffer.from(`${chatLine(0)}\n`), 'in.jsonl');
    const short = await client.files.create({ file: await body(), purpose: 'batch', expires_after: { anchor: 'created_at', seconds: 7200 } });
    expect((short.expires_at as number) - short.created_at).toBe(7200);
    const long = await client.files.create({ file: await body(), purpose: 'batch', expires_after: { anchor: 'created_at', seconds: 2592000 } });
    expect((long.expires_at as number) - long.created_at).toBe(7 * 86400);
    const err = await client.files.create({ file: await body(), purpose: 'batch', expires_after: { anchor: 'created_at', seconds: 60 } }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe('expires_after.seconds');
    expect((await client.files.list()).data.map((f) => f.id).sort()).toEqual([short.id, long.id].sort());
  }, 60_000);

  it('model is null when the lines name different models; a bad output_expires_after is a 400 naming it', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const file = await upload(client, [chatLine(0), chatLine(1, 'sim/lorem')]);
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(batch.model).toBeNull();
    await waitEnded(client, batch.id);
    const bad = await fetch(`${stack.baseUrl}/batches`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        input_file_id: file.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        output_expires_after: { anchor: 'created_at', seconds: 60 },
      }),
    });
    expect(bad.status).toBe(400);
    const body = await bad.json();
    expect(body.error.param).toBe('output_expires_after.seconds');
    expect(body.error.type).toBe('invalid_request_error');
    // nothing was created by the refused call: still one batch
    expect((await client.batches.list()).data.map((b) => b.id)).toEqual([batch.id]);
  }, 60_000);
});
