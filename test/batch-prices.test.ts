import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { costMicros, type Prices } from '../src/billing/money.ts';
import { addDeployment, upsertModel } from '../src/db/models.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Batch prices (issue 30): a line of a batch is held and debited at the batch prices of the model
// (`--batch-input-price`, `--batch-output-price`) or of the deployment that answered; a model
// without batch prices bills its lines at its online prices; an online request to a model with
// batch prices is still billed at the online ones. Models of their own (ids batchprice/…), served
// by the sim pool's echo.

let stack: TestStack;

// online R$ 1000 / R$ 2000 per 1M tokens (1 000 and 2 000 µBRL a token), batch 1000 times cheaper
const ONLINE: Prices = { input: 1_000_000_000n, output: 2_000_000_000n };
const BATCH: Prices = { input: 1_000_000n, output: 2_000_000n };
// the batch prices of deployment `cheap` of batchprice/deployed
const DEPLOYMENT_BATCH: Prices = { input: 500_000n, output: 700_000n };

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4' } });
  const common = { pool: 'sim', upstream_model: 'echo', input_price: ONLINE.input, output_price: ONLINE.output, max_output_tokens: 64 };
  await upsertModel(stack.db, { id: 'batchprice/echo', ...common, batch_input_price: BATCH.input, batch_output_price: BATCH.output });
  await upsertModel(stack.db, { id: 'batchprice/plain', ...common, input_price: 1_000_000n, output_price: 2_000_000n });
  await upsertModel(stack.db, { id: 'batchprice/deployed', ...common, batch_input_price: BATCH.input, batch_output_price: BATCH.output });
  await stack.db.query("delete from model_deployments where model_id = 'batchprice/deployed'");
  await addDeployment(stack.db, `dep_batchprice_${Date.now().toString(36)}`, {
    model_id: 'batchprice/deployed',
    name: 'cheap',
    protocol: 'sim',
    upstream_model: 'echo',
    batch_input_price: DEPLOYMENT_BATCH.input,
    batch_output_price: DEPLOYMENT_BATCH.output,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

type Body = Record<string, unknown>;
interface ResultLine {
  custom_id: string;
  response: { status_code: number; request_id: string; body: Body & { usage?: { prompt_tokens: number; completion_tokens: number } } } | null;
  error: { code: string } | null;
}

const chatLine = (i: number, model: string, body: Body = {}) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, max_tokens: 16, messages: [{ role: 'user', content: `hello number ${i}` }], ...body },
  });

async function runBatch(client: OpenAI, lines: string[]) {
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const deadline = Date.now() + 20_000;
  for (;;) {
    const b = await client.batches.retrieve(batch.id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${batch.id} still ${b.status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function contentLines(client: OpenAI, fileId: string | null | undefined): Promise<ResultLine[]> {
  if (!fileId) return [];
  const text = await (await client.files.content(fileId)).text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

const balanceOf = async (tenantId: string): Promise<bigint> =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros;

/** Each request debited exactly once, its usage at `prices`; the balance the grant less those debits; the ledger consistent. */
async function expectBilledAt(tenantId: string, granted: bigint, answered: { id: string; prompt: number; completion: number }[], prices: Prices) {
  const ids = answered.map((a) => a.id);
  await stack.waitSettled(ids, 20_000);
  await stack.waitNoHolds(tenantId, 20_000);
  const { rows } = await stack.db.query<{ request_id: string; amount_micros: bigint }>(
    "select request_id, amount_micros from ledger where tenant_id = $1 and kind = 'debit'",
    [tenantId],
  );
  expect(rows.length).toBe(answered.length);
  const debits = new Map(rows.map((r) => [r.request_id, BigInt(r.amount_micros)]));
  let total = 0n;
  for (const a of answered) {
    const cost = costMicros(a.prompt, a.completion, prices);
    expect(cost).toBeGreaterThan(0n);
    expect(debits.get(a.id)).toBe(cost);
    total += cost;
  }
  expect(await balanceOf(tenantId)).toBe(granted - total);
  expect((await ledgerCheck(stack.db, { tenantId })).ok).toBe(true);
}

const answeredOf = (lines: ResultLine[]) =>
  lines.map((l) => {
    const usage = l.response?.body.usage as { prompt_tokens: number; completion_tokens: number };
    return { id: l.response?.request_id as string, prompt: usage.prompt_tokens, completion: usage.completion_tokens };
  });

describe('batch prices', () => {
  it('each line is held and debited at the model’s batch prices, exactly; an online request at the online prices', async () => {
    // 0,03 BRL: at the batch prices every line fits (a hold of some tens of µBRL); held at the online
    // prices, no line would (16 output tokens × 2 000 µBRL = 32 000 µBRL, plus its prompt)
    const t = await stack.tenant('0.03');
    const client = clientOf(t.key);
    const ended = await runBatch(
      client,
      Array.from({ length: 20 }, (_, i) => chatLine(i, 'batchprice/echo')),
    );
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: 20, completed: 20, failed: 0 });
    const output = await contentLines(client, ended.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 20 }, (_, i) => `req-${i}`));
    const answered = answeredOf(output);
    await expectBilledAt(t.tenantId, 30_000n, answered, BATCH);

    // the same model online: held at its online prices — more than what is left — so refused, nothing charged
    const before = await balanceOf(t.tenantId);
    const refused = await client.chat.completions
      .create({ model: 'batchprice/echo', max_tokens: 40, messages: [{ role: 'user', content: 'hello online' }] })
      .then(
        () => null,
        (err: InstanceType<typeof OpenAI.APIError>) => ({ status: err.status, code: (err.error as { code?: string }).code }),
      );
    expect(refused).toEqual({ status: 402, code: 'insufficient_balance' });
    expect(await balanceOf(t.tenantId)).toBe(before);
  }, 60_000);

  it('an online request to a model with batch prices is debited at its online prices', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const r = await client.chat.completions.create({ model: 'batchprice/echo', max_tokens: 16, messages: [{ role: 'user', content: 'hello online' }] });
    const usage = r.usage as { prompt_tokens: number; completion_tokens: number };
    await expectBilledAt(t.tenantId, 10_000_000n, [{ id: r.id, prompt: usage.prompt_tokens, completion: usage.completion_tokens }], ONLINE);
  }, 60_000);

  it('a model without batch prices bills its lines at its online prices', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const ended = await runBatch(
      client,
      Array.from({ length: 10 }, (_, i) => chatLine(i, 'batchprice/plain')),
    );
    expect(ended.request_counts).toEqual({ total: 10, completed: 10, failed: 0 });
    const output = await contentLines(client, ended.output_file_id);
    await expectBilledAt(t.tenantId, 10_000_000n, answeredOf(output), { input: 1_000_000n, output: 2_000_000n });
  }, 60_000);

  it('a line answered by a deployment is debited at that deployment’s batch prices; by the primary, at the model’s', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const ended = await runBatch(client, [
      chatLine(0, 'batchprice/deployed', { provider: { only: ['cheap'] } }),
      chatLine(1, 'batchprice/deployed', { provider: { only: ['primary'] } }),
    ]);
    expect(ended.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
    const [cheap, primary] = answeredOf(await contentLines(client, ended.output_file_id));
    await stack.waitSettled([cheap.id, primary.id], 20_000);
    await stack.waitNoHolds(t.tenantId, 20_000);
    const { rows } = await stack.db.query<{ request_id: string; amount_micros: bigint }>(
      "select request_id, amount_micros from ledger where tenant_id = $1 and kind = 'debit'",
      [t.tenantId],
    );
    const debits = new Map(rows.map((r) => [r.request_id, BigInt(r.amount_micros)]));
    expect(debits.size).toBe(2);
    const cheapCost = costMicros(cheap.prompt, cheap.completion, DEPLOYMENT_BATCH);
    const primaryCost = costMicros(primary.prompt, primary.completion, BATCH);
    expect(debits.get(cheap.id)).toBe(cheapCost);
    expect(debits.get(primary.id)).toBe(primaryCost);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n - cheapCost - primaryCost);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
  }, 60_000);
});
