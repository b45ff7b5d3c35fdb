import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { costMicros, type Prices } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Anthropic's Message Batches API with the real `@anthropic-ai/sdk`: messages.batches.create with
// inline requests, retrieve until ended, results (JSONL), list, cancel, delete. Each request that
// succeeded is debited once, exactly its usage at the model's batch prices; an unknown model is an
// errored result; a cancel before the requests run leaves them canceled and unbilled.

let stack: TestStack;
let origin: string;
const ONLINE: Prices = { input: 4_000_000n, output: 8_000_000n };
const BATCH: Prices = { input: 2_000_000n, output: 4_000_000n };

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4' } });
  origin = stack.baseUrl.replace(/\/v1$/, '');
  await upsertModel(stack.db, {
    id: 'msgbatch/echo',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: ONLINE.input,
    output_price: ONLINE.output,
    batch_input_price: BATCH.input,
    batch_output_price: BATCH.output,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new Anthropic({ baseURL: origin, apiKey: key, maxRetries: 0 });
const request = (i: number, params: Record<string, unknown> = {}) => ({
  custom_id: `req-${i}`,
  params: { model: 'msgbatch/echo', max_tokens: 16, messages: [{ role: 'user' as const, content: `hello number ${i}` }], ...params },
});

async function waitEnded(client: Anthropic, id: string) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const b = await client.messages.batches.retrieve(id);
    if (b.processing_status === 'ended') return b;
    if (Date.now() > deadline) throw new Error(`message batch ${id} still ${b.processing_status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('Anthropic Message Batches', () => {
  it('create, retrieve, results, list, delete; each succeeded request billed once at the batch prices', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const created = await client.messages.batches.create({
      requests: [request(0), request(1, { model: 'msgbatch/nope' }), request(2), request(3, { messages: 'not a list' })] as never,
    });
    expect(created).toMatchObject({
      type: 'message_batch',
      processing_status: 'in_progress',
      archived_at: null,
      cancel_initiated_at: null,
      results_url: null,
      ended_at: null,
    });
    expect(created.id).toMatch(/^msgbatch_[0-9a-f]{24}$/);
    expect(created.request_counts.processing + created.request_counts.succeeded + created.request_counts.errored).toBe(4);
    const ended = await waitEnded(client, created.id);
    expect(ended.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 2, canceled: 0, expired: 0 });
    expect(ended.ended_at).toEqual(expect.any(String));
    expect(ended.results_url).toBe(`/v1/messages/batches/${created.id}/results`);

    const results: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
    for await (const r of await client.messages.batches.results(created.id)) results.push(r);
    expect(results.map((r) => [r.custom_id, r.result.type])).toEqual([
      ['req-0', 'succeeded'],
      ['req-1', 'errored'],
      ['req-2', 'succeeded'],
      ['req-3', 'errored'],
    ]);
    const unknown = results[1].result as Anthropic.Messages.Batches.MessageBatchErroredResult;
    expect(unknown.error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    const invalid = results[3].result as Anthropic.Messages.Batches.MessageBatchErroredResult;
    expect(invalid.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });

    // each succeeded request: a message, debited once at the batch prices
    const messages = results
      .filter((r) => r.result.type === 'succeeded')
      .map((r) => (r.result as Anthropic.Messages.Batches.MessageBatchSucceededResult).message);
    for (const m of messages) expect(m).toMatchObject({ type: 'message', role: 'assistant', model: 'msgbatch/echo' });
    const { rows: lines } = await stack.db.query<{ request_id: string }>('select request_id from batch_results where batch_id = $1 and ok order by line', [
      created.id,
    ]);
    const ids = lines.map((l) => l.request_id);
    await stack.waitSettled(ids, 20_000);
    await stack.waitNoHolds(t.tenantId, 20_000);
    const { rows } = await stack.db.query<{ request_id: string; amount_micros: bigint }>(
      "select request_id, amount_micros from ledger where tenant_id = $1 and kind = 'debit'",
      [t.tenantId],
    );
    expect(rows.length).toBe(2);
    const debits = new Map(rows.map((r) => [r.request_id, BigInt(r.amount_micros)]));
    let total = 0n;
    messages.forEach((m, i) => {
      const cost = costMicros(m.usage.input_tokens, m.usage.output_tokens, BATCH);
      expect(debits.get(ids[i])).toBe(cost);
      total += cost;
    });
    const { rows: tenant } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(tenant[0].balance_micros).toBe(10_000_000n - total);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);

    const page = await client.messages.batches.list({ limit: 10 });
    expect(page.data.map((b) => b.id)).toEqual([created.id]);
    // OpenAI's list does not show it
    const openaiList = await fetch(`${stack.baseUrl}/batches`, { headers: { authorization: `Bearer ${t.key}` } }).then((r) => r.json());
    expect(openaiList.data).toEqual([]);

    expect(await client.messages.batches.delete(created.id)).toEqual({ id: created.id, type: 'message_batch_deleted' });
    const gone = await client.messages.batches.retrieve(created.id).then(
      () => null,
      (err: InstanceType<typeof Anthropic.APIError>) => err.status,
    );
    expect(gone).toBe(404);
  }, 60_000);

  it('cancel: requests not run are canceled and not billed; cancelling an ended batch is refused', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const slow = { sim: { first_token_ms: 150 } };
    const created = await client.messages.batches.create({ requests: Array.from({ length: 40 }, (_, i) => request(i, slow)) as never });
    const canceling = await client.messages.batches.cancel(created.id);
    expect(['canceling', 'ended']).toContain(canceling.processing_status);
    expect(canceling.cancel_initiated_at).toEqual(expect.any(String));
    const ended = await waitEnded(client, created.id);
    const c = ended.request_counts;
    expect(c.processing).toBe(0);
    expect(c.errored).toBe(0);
    expect(c.canceled).toBeGreaterThan(0);
    expect(c.succeeded + c.canceled).toBe(40);
    const results: Anthropic.Messages.Batches.MessageBatchIndividualResponse[] = [];
    for await (const r of await client.messages.batches.results(created.id)) results.push(r);
    expect(results.filter((r) => r.result.type === 'canceled').length).toBe(c.canceled);
    await stack.waitNoHolds(t.tenantId, 20_000);
    const { rows: okLines } = await stack.db.query<{ request_id: string }>('select request_id from batch_results where batch_id = $1 and ok', [created.id]);
    if (okLines.length)
      await stack.waitSettled(
        okLines.map((l) => l.request_id),
        20_000,
      );
    const { rows } = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId]);
    expect(rows[0].n).toBe(c.succeeded);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
    const refused = await client.messages.batches.cancel(created.id).then(
      () => null,
      (err: InstanceType<typeof Anthropic.APIError>) => err.status,
    );
    expect(refused).toBe(400);
  }, 60_000);
});
