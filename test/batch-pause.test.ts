import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIM_PRICES, startStack, type TestStack } from './helpers/stack.ts';
import { costMicros } from '../src/billing/money.ts';

// A front door whose interactive traffic stays at BATCH_PAUSE_IN_FLIGHT holds the batch lines it has
// taken from the queue without starting them, for as long as that traffic lasts: longer, here, than
// the queue's ack wait. The lines held are told to JetStream as in progress meanwhile, so none is
// delivered a second time (a second copy taken while the first runs would end that line
// line_interrupted and lose its answer); once the traffic ends every line runs once, billed once.

const ACK_WAIT_MS = 1500;
let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4', BATCH_PAUSE_IN_FLIGHT: '1', BATCH_ACK_WAIT_MS: String(ACK_WAIT_MS) } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a batch beside interactive traffic', () => {
  it('waits while the door is busy, longer than the ack wait, then runs each line once', async () => {
    const t = await stack.tenant('10');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0, timeout: 30_000 });
    // one interactive request in flight for ~4 ack waits: the door's runner pauses
    const interactive = client.chat.completions.create({
      model: 'sim/echo',
      max_tokens: 8,
      messages: [{ role: 'user', content: 'a long wait' }],
      // @ts-expect-error the sim's own parameters
      sim: { first_token_ms: 4 * ACK_WAIT_MS },
    });
    await sleep(300);
    // each line lasts long enough that a second copy would be taken while the first runs
    const lines = Array.from({ length: 3 }, (_, i) =>
      JSON.stringify({
        custom_id: `req-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'sim/echo', max_tokens: 8, messages: [{ role: 'user', content: `line ${i}` }], sim: { first_token_ms: 800 } },
      }),
    );
    const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await sleep(2 * ACK_WAIT_MS);
    // still paused: nothing claimed while the interactive request is in flight
    const { rows: claimed } = await stack.db.query('select count(*)::int as n from batch_results where batch_id = $1', [batch.id]);
    expect(claimed[0].n).toBe(0);
    const answer = await interactive;
    expect(answer.choices[0]!.message.content).toBe('a long wait');

    let b = await client.batches.retrieve(batch.id);
    for (const deadline = Date.now() + 20_000; b.status !== 'completed' && Date.now() < deadline; ) {
      await sleep(200);
      b = await client.batches.retrieve(batch.id);
    }
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    expect(b.error_file_id).toBeNull();
    const out = (await (await client.files.content(b.output_file_id!)).text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(out.map((l: { custom_id: string; response: { status_code: number } }) => [l.custom_id, l.response.status_code])).toEqual([
      ['req-0', 200],
      ['req-1', 200],
      ['req-2', 200],
    ]);
    const ids = out.map((l: { response: { request_id: string } }) => l.response.request_id);
    await stack.waitSettled(ids, 20_000);
    await stack.waitNoHolds(t.tenantId, 20_000);
    const { rows: debits } = await stack.db.query(
      "select request_id, amount_micros as amount from ledger where tenant_id = $1 and kind = 'debit' and batch_id = $2 order by request_id",
      [t.tenantId, batch.id],
    );
    expect(debits.map((d: { request_id: string }) => d.request_id)).toEqual([...ids].sort());
    for (const [i, l] of out.entries()) {
      const u = l.response.body.usage as { prompt_tokens: number; completion_tokens: number };
      expect(BigInt(debits.find((d: { request_id: string }) => d.request_id === ids[i]).amount)).toBe(
        costMicros(u.prompt_tokens, u.completion_tokens, SIM_PRICES.echo),
      );
    }
  }, 60_000);
});
