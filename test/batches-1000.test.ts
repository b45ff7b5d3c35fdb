import { randomBytes } from 'node:crypto';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { upsertModel } from '../src/db/models.ts';
import { expectBalanceEqualsLedger } from './helpers/ledger.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Issue 30 at size: the real `openai` SDK uploads a 1,000-line JSONL chat batch and a 1,000-line
// embeddings batch, creates both, polls them and downloads their output (and error) files. Every
// line that answered is debited once, exactly at the model's batch prices over the usage the sim
// reported in that line's answer (µBRL per 1M tokens, rounded up to the µBRL, computed here by
// hand), with its batch on the debit (ledger.batch_id); the balance is the ledger's; request_counts
// are exact. Models of their own (b1000/…), served by the sim pool's echo and embed. The runner
// takes BATCH_CONCURRENCY lines at once per door (default 4): raised to 32 here to keep it quick.

let stack: TestStack;
const u = randomBytes(3).toString('hex');
const CHAT = `b1000/chat-${u}`;
const EMBED = `b1000/embed-${u}`;
// online prices 10× the batch ones: a line billed online would show
const CHAT_BATCH = { input: 412_500n, output: 1_650_003n };
const EMBED_BATCH = { input: 1_234_567n };

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '32' } });
  await upsertModel(stack.db, {
    id: CHAT,
    pool: 'sim',
    upstream_model: 'echo',
    input_price: CHAT_BATCH.input * 10n,
    output_price: CHAT_BATCH.output * 10n,
    batch_input_price: CHAT_BATCH.input,
    batch_output_price: CHAT_BATCH.output,
    max_output_tokens: 64,
  });
  await upsertModel(stack.db, {
    id: EMBED,
    pool: 'sim',
    upstream_model: 'embed',
    kind: 'embedding',
    input_price: EMBED_BATCH.input * 10n,
    output_price: 0n,
    batch_input_price: EMBED_BATCH.input,
    batch_output_price: 0n,
    context_length: 8192,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

type Body = Record<string, unknown> & { usage?: { prompt_tokens: number; completion_tokens?: number; total_tokens: number } };
interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: Body } | null;
  error: { code: string; message: string } | null;
}

const N = 1000;
/** µBRL of a line at these prices: ⌈(input × price + output × price) / 10⁶⌉, by hand */
const byHand = (input: number, output: number, p: { input: bigint; output?: bigint }) => {
  const units = BigInt(input) * p.input + BigInt(output) * (p.output ?? 0n);
  return (units + 999_999n) / 1_000_000n;
};

async function run(client: OpenAI, endpoint: '/v1/chat/completions' | '/v1/embeddings', lines: string[]) {
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  expect([file.purpose, file.status, file.bytes]).toEqual(['batch', 'processed', Buffer.byteLength(`${lines.join('\n')}\n`)]);
  const created = await client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
  expect([created.status, created.request_counts]).toEqual(['in_progress', { total: N, completed: 0, failed: 0 }]);
  const deadline = Date.now() + 150_000;
  for (;;) {
    const b = await client.batches.retrieve(created.id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${b.id} still ${b.status}: ${JSON.stringify(b.request_counts)}`);
    await new Promise((r) => setTimeout(r, 500));
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

/** Each answered line's one debit: exactly `expected(line)`, naming the batch; nothing else debited for the batch. */
async function expectBilled(tenantId: string, batchId: string, ok: ResultLine[], expected: (l: ResultLine) => bigint): Promise<bigint> {
  const ids = ok.map((l) => l.response!.request_id);
  await stack.waitSettled(ids, 60_000);
  await stack.waitNoHolds(tenantId, 30_000);
  const { rows } = await stack.db.query(
    "select request_id, amount_micros, batch_id from ledger where tenant_id = $1 and kind = 'debit' and request_id = any($2)",
    [tenantId, ids],
  );
  expect(rows.length).toBe(ok.length);
  const debits = new Map(rows.map((r) => [r.request_id as string, { amount: BigInt(r.amount_micros), batch: r.batch_id as string }]));
  let total = 0n;
  const wrong: string[] = [];
  for (const l of ok) {
    const d = debits.get(l.response!.request_id);
    const want = expected(l);
    if (d?.amount !== want || d.batch !== batchId) wrong.push(`${l.custom_id}: ${d?.amount} ${d?.batch}, expected ${want}`);
    total += want;
  }
  expect(wrong).toEqual([]);
  // the batch's spend (what the portal's "Lotes" and the console sum): exactly these debits
  const spend = await stack.db.query("select count(*)::int as n, sum(amount_micros)::bigint as s from ledger where batch_id = $1 and kind = 'debit'", [
    batchId,
  ]);
  expect([spend.rows[0].n, BigInt(spend.rows[0].s)]).toEqual([ok.length, total]);
  return total;
}

describe('1,000-line batches with the openai SDK', () => {
  it('chat: 995 lines answered and 5 refused (unknown model), every answered line billed exactly at the batch prices', { timeout: 240_000 }, async () => {
    const t = await stack.tenant('100');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const bad = new Set([0, 249, 500, 751, 999]);
    const lines = Array.from({ length: N }, (_, i) =>
      JSON.stringify({
        custom_id: `chat-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: bad.has(i) ? `b1000/none-${u}` : CHAT, max_tokens: 16, messages: [{ role: 'user', content: `line ${i}: ${'palavra '.repeat(i % 7)}` }] },
      }),
    );
    const ended = await run(client, '/v1/chat/completions', lines);
    expect([ended.status, ended.request_counts]).toEqual(['completed', { total: N, completed: 995, failed: 5 }]);
    const output = await contentLines(client, ended.output_file_id);
    const errors = await contentLines(client, ended.error_file_id);
    expect(output.map((l) => l.custom_id)).toEqual([...Array(N).keys()].filter((i) => !bad.has(i)).map((i) => `chat-${i}`));
    expect(errors.map((l) => [l.custom_id, l.response?.status_code])).toEqual([...bad].map((i) => [`chat-${i}`, 404]));
    expect(output.every((l) => l.response?.status_code === 200 && l.response.body.object === 'chat.completion' && l.error === null)).toBe(true);
    const total = await expectBilled(t.tenantId, ended.id, output, (l) =>
      byHand(l.response!.body.usage!.prompt_tokens, l.response!.body.usage!.completion_tokens!, CHAT_BATCH),
    );
    // nothing else was debited: the refused lines cost nothing
    const debits = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId]);
    expect(debits.rows[0].n).toBe(995);
    const balance = (await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId])).rows[0].balance_micros;
    expect(BigInt(balance)).toBe(100_000_000n - total);
    await expectBalanceEqualsLedger(stack, t.tenantId);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
  });

  it('embeddings: 1,000 lines, each billed exactly its prompt tokens at the batch input price', { timeout: 240_000 }, async () => {
    const t = await stack.tenant('100');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const lines = Array.from({ length: N }, (_, i) =>
      JSON.stringify({
        custom_id: `emb-${i}`,
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: EMBED, input: i % 3 === 0 ? [`texto ${i}`, `outro texto ${i} ${'x'.repeat(i % 11)}`] : `texto número ${i} ${'y '.repeat(i % 5)}` },
      }),
    );
    const ended = await run(client, '/v1/embeddings', lines);
    expect([ended.status, ended.request_counts, ended.error_file_id]).toEqual(['completed', { total: N, completed: N, failed: 0 }, null]);
    const output = await contentLines(client, ended.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual([...Array(N).keys()].map((i) => `emb-${i}`));
    // each answer: one embedding per input, and its usage
    expect(output.map((l) => (l.response!.body.data as unknown[]).length)).toEqual([...Array(N).keys()].map((i) => (i % 3 === 0 ? 2 : 1)));
    expect(output.every((l) => l.response!.body.object === 'list' && l.response!.body.usage!.prompt_tokens > 0)).toBe(true);
    const total = await expectBilled(t.tenantId, ended.id, output, (l) => byHand(l.response!.body.usage!.prompt_tokens, 0, EMBED_BATCH));
    const balance = (await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId])).rows[0].balance_micros;
    expect(BigInt(balance)).toBe(100_000_000n - total);
    await expectBalanceEqualsLedger(stack, t.tenantId);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
  });
});
