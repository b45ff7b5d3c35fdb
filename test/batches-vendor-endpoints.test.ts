import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { costMicros, holdPrices, type Prices } from '../src/billing/money.ts';
import { catalogEntry } from '../src/catalog/catalog.ts';
import { getModel, listDeployments, upsertModel } from '../src/db/models.ts';
import { outputTokens } from '../src/gateway/hold.ts';
import { completions } from '../src/protocols/completions/index.ts';
import { embeddings } from '../src/protocols/embeddings/index.ts';
import type { ParsedRequest, Protocol } from '../src/protocols/types.ts';
import { expectBalanceEqualsLedger } from './helpers/ledger.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';
import { balanceOf as balanceOfTenant, batchEnded, expectBatchBilled, fileLines } from './helpers/batches.ts';

// `vendor` batch mode for OpenAI batches of /v1/embeddings and /v1/completions (docs/batch.md
// "vendor mode"): their lines go to the deployment's own Batch API (the mock vendor) as chat lines
// do, each held before submission for its worst case at the deployment's batch prices (an
// embeddings line: its input's bound alone) and debited once from the vendor's usage. Models of
// their own (vbatch-ep/…).

const UPSTREAM_KEY = 'sk-vendor-batch-endpoints-test';
let stack: TestStack;
let mock: MockUpstream;

// BRL 20 and 40 per 1M tokens online; the batch prices half (10 µBRL a token of input)
const ONLINE: Prices = { input: 20_000_000n, output: 40_000_000n };
const BATCH: Prices = { input: 10_000_000n, output: 20_000_000n };

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, {
    pools: 'sim,openai',
    env: { BATCH_VENDOR_POLL_MS: '150' },
    vendor: { outputTokens: 4 },
  }));
  const common = {
    pool: 'openai',
    protocol: 'openai' as const,
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: ONLINE.input,
    output_price: ONLINE.output,
    batch_input_price: BATCH.input,
    batch_output_price: BATCH.output,
    batch_mode: 'vendor' as const,
  };
  const embedding = { ...common, kind: 'embedding' as const, context_length: 8192 };
  await upsertModel(stack.db, { id: 'vbatch-ep/embed', upstream_model: 'text-embedding-3-small', ...embedding });
  await upsertModel(stack.db, { id: 'vbatch-ep/embed-500', upstream_model: 'mock-embed-500', ...embedding });
  await upsertModel(stack.db, {
    id: 'vbatch-ep/instruct',
    upstream_model: 'gpt-3.5-turbo-instruct',
    ...common,
    legacy_completions: true,
    max_output_tokens: 64,
    context_length: 4096,
  });
  // no legacy /completions at its vendor: its text completions are translated to chat, which a vendor batch of /v1/completions cannot take
  await upsertModel(stack.db, { id: 'vbatch-ep/chat', upstream_model: 'mock-gpt', ...common, max_output_tokens: 64, context_length: 4096 });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.urlOf(stack.gateways[0]), apiKey: key, maxRetries: 0 });

interface ResultLine {
  id: string;
  custom_id: string;
  response: {
    status_code: number;
    request_id: string;
    body: Record<string, unknown> & { usage?: Record<string, number> };
  } | null;
  error: { code: string; message: string } | null;
}

const errorOf = (l: ResultLine) => (l.response?.body as { error: { code: string; param: string | null } } | undefined)?.error ?? { code: null, param: null };

type Endpoint = '/v1/embeddings' | '/v1/completions';

const lineOf = (endpoint: Endpoint, i: number, body: Record<string, unknown>) => JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: endpoint, body });

async function create(client: OpenAI, endpoint: Endpoint, lines: string[]) {
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
}

const ended = batchEnded;
const contentLines = (client: OpenAI, fileId: string | null | undefined) => fileLines<ResultLine>(client, fileId);

const balanceOf = (tenantId: string) => balanceOfTenant(stack, tenantId);

const chunksOf = async (batchId: string) =>
  (await stack.db.query<{ n: number }>('select array_length(lines, 1) as n from vendor_batch_chunks where batch_id = $1 order by chunk', [batchId])).rows.map(
    (r) => r.n,
  );

/** A line's worst case as its online route bounds it (its input bound, its output cap) at the batch prices. */
async function holdOf(protocol: Protocol<ParsedRequest>, body: Record<string, unknown>): Promise<bigint> {
  const id = String(body.model);
  const m = catalogEntry((await getModel(stack.db, id))!, await listDeployments(stack.db, id));
  const req = protocol.parse(body);
  return costMicros(protocol.inputBound(req, m), outputTokens(protocol.outputCap(req), m).wanted, holdPrices(BATCH));
}

/** Each answered line debited once at the batch prices (its vendor's usage), batch_id recorded; no hold left; balance = ledger. */
const expectBilled = (tenantId: string, granted: bigint, batchId: string, answered: ResultLine[]) =>
  expectBatchBilled(stack, tenantId, granted, batchId, answered, BATCH);

const TEXT = 'the corpus paragraph to embed, in a vendor batch';

describe('vendor batch mode: /v1/embeddings', () => {
  it("the openai SDK's embeddings batch goes to the vendor's Batch API: OpenAI's lines out, each billed once at the batch price from its prompt tokens", async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = { ...mock.stats.batch };
    const bodies = [
      { model: 'vbatch-ep/embed', input: TEXT },
      { model: 'vbatch-ep/embed', input: [TEXT, 'a second text', 'a third one'] },
      { model: 'vbatch-ep/embed', input: [[1, 2, 3, 4, 5]], dimensions: 8 },
      { model: 'vbatch-ep/embed', input: TEXT, encoding_format: 'base64', dimensions: 4, user: 'corpus-job' },
    ];
    const created = await create(
      client,
      '/v1/embeddings',
      bodies.map((b, i) => lineOf('/v1/embeddings', i, b)),
    );
    expect(created.endpoint).toBe('/v1/embeddings');
    expect(created.status).toBe('in_progress');
    const b = await ended(client, created.id);
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 4, completed: 4, failed: 0 });
    expect(b.error_file_id).toBeNull();
    // one chunk of the four lines went to the vendor: one file, one batch of /v1/embeddings
    expect(await chunksOf(b.id)).toEqual([4]);
    expect(mock.stats.batch.files - before.files).toBe(1);
    expect(mock.stats.batch.batches - before.batches).toBe(1);
    expect(mock.stats.batch.succeeded - before.succeeded).toBe(4);
    // the last line as the vendor got it: the upstream model, its allowlisted fields
    expect(mock.stats.lastBody).toEqual({ model: 'text-embedding-3-small', input: TEXT, encoding_format: 'base64', dimensions: 4, user: 'corpus-job' });

    const output = await contentLines(client, b.output_file_id);
    expect(output.map((l) => [l.custom_id, l.response?.status_code, l.error])).toEqual(bodies.map((_, i) => [`req-${i}`, 200, null]));
    for (const l of output) {
      expect(l.id).toMatch(/^batch_req_/);
      const body = l.response!.body as { object: string; model: string; data: Array<{ object: string; index: number; embedding: unknown }>; usage: object };
      expect(body.object).toBe('list');
      expect(body.model).toBe('vbatch-ep/embed');
      const u = l.response!.body.usage!;
      expect(Object.keys(u).sort()).toEqual(['prompt_tokens', 'total_tokens']);
      expect(u.total_tokens).toBe(u.prompt_tokens);
      expect(u.prompt_tokens).toBeGreaterThan(0);
    }
    const dataOf = (i: number) => (output[i].response!.body as { data: Array<{ object: string; index: number; embedding: unknown }> }).data;
    expect(dataOf(1).map((d) => [d.object, d.index])).toEqual([
      ['embedding', 0],
      ['embedding', 1],
      ['embedding', 2],
    ]);
    expect((dataOf(0)[0].embedding as number[]).length).toBe(1536);
    expect((dataOf(2)[0].embedding as number[]).length).toBe(8);
    // base64: four float32 values
    expect(Buffer.from(dataOf(3)[0].embedding as string, 'base64').byteLength).toBe(16);
    // the vendor billed the same prompt tokens at its batch discount, no output
    const prompt = output.reduce((s, l) => s + l.response!.body.usage!.prompt_tokens, 0);
    expect(mock.stats.batch.prompt_tokens - before.prompt_tokens).toBe(prompt);
    expect(mock.stats.batch.completion_tokens - before.completion_tokens).toBe(0);
    const total = await expectBilled(t.tenantId, 10_000_000n, b.id, output);
    expect(total).toBe(costMicros(prompt, 0, BATCH));
  }, 60_000);

  it("each line is held for its input's bound at the batch price before its chunk is submitted: a balance of 2.5 holds submits chunks of 2, then 402", async () => {
    // 2 000 bytes the vendor counts as 1 000 tokens: a line costs about half its hold
    const body = { model: 'vbatch-ep/embed', input: 'a b '.repeat(500) };
    const h = await holdOf(embeddings as Protocol<ParsedRequest>, body);
    // the input's bound (2000 bytes and the per-input framing) at 10 µBRL a token, no output
    expect(h).toBeGreaterThan(20_000n);
    const granted = (h * 5n) / 2n;
    const t = await stack.tenant((Number(granted) / 1e6).toFixed(6));
    expect(await balanceOf(t.tenantId)).toBe(granted);
    const client = clientOf(t.key);
    const created = await create(
      client,
      '/v1/embeddings',
      Array.from({ length: 6 }, (_, i) => lineOf('/v1/embeddings', i, body)),
    );
    const b = await ended(client, created.id);
    const output = await contentLines(client, b.output_file_id);
    const errors = await contentLines(client, b.error_file_id);
    expect(output.length).toBeGreaterThan(0);
    const c = costMicros(output[0].response!.body.usage!.prompt_tokens, 0, BATCH);
    expect(c).toBe(costMicros(1000, 0, BATCH));
    expect(c).toBeLessThan(h);
    // The first chunk is the 2 lines 2.5 h covers. How the rest splits into chunks depends on when
    // metering settles each line's hold (a line still held counts h, a settled one c); how many run
    // does not: a line is taken only while the holds cover it, so the lines run until the balance,
    // everything settled, is below one hold — the first n with granted - n c < h.
    let ran = 0;
    while (ran < 6 && granted - BigInt(ran) * c >= h) ran++;
    const chunks = await chunksOf(b.id);
    expect(chunks[0]).toBe(2);
    for (const n of chunks) expect(n === 1 || n === 2).toBe(true);
    expect(chunks.reduce((a, n) => a + n, 0)).toBe(ran);
    expect(ran).toBe(4);
    expect(b.request_counts).toEqual({ total: 6, completed: ran, failed: 6 - ran });
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, errorOf(l).code])).toEqual(
      Array.from({ length: 6 - ran }, (_, i) => [`req-${ran + i}`, 402, 'insufficient_balance']),
    );
    expect(await expectBilled(t.tenantId, granted, b.id, output)).toBe(BigInt(ran) * c);
  }, 60_000);

  it("a chunk carries at most OpenAI's 50 000 embedding inputs: 26 lines of 2 000 inputs go as 25 and 1, none failed by the vendor", async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = mock.stats.batch.batches;
    const inputs = Array.from({ length: 2000 }, (_, i) => `w${i}`);
    const created = await create(
      client,
      '/v1/embeddings',
      Array.from({ length: 26 }, (_, i) => lineOf('/v1/embeddings', i, { model: 'vbatch-ep/embed', input: inputs, dimensions: 1 })),
    );
    const b = await ended(client, created.id, 60_000);
    expect(b.request_counts).toEqual({ total: 26, completed: 26, failed: 0 });
    expect(await chunksOf(b.id)).toEqual([25, 1]);
    expect(mock.stats.batch.batches - before).toBe(2);
    const output = await contentLines(client, b.output_file_id);
    expect(output.map((l) => (l.response!.body as { data: unknown[] }).data.length)).toEqual(Array(26).fill(2000));
    await expectBilled(t.tenantId, 10_000_000n, b.id, output);
  }, 90_000);

  it('a line the vendor fails gives its hold back; a line this gateway refuses never reaches the vendor', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = mock.stats.batch.lines;
    const failing = await create(client, '/v1/embeddings', [
      lineOf('/v1/embeddings', 0, { model: 'vbatch-ep/embed-500', input: TEXT }),
      lineOf('/v1/embeddings', 1, { model: 'vbatch-ep/embed-500', input: TEXT, encoding_format: 'hex' }),
    ]);
    const b = await ended(client, failing.id);
    expect(b.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(b.output_file_id).toBeNull();
    expect(await chunksOf(b.id)).toEqual([1]);
    const errors = await contentLines(client, b.error_file_id);
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, errorOf(l).param])).toEqual([
      ['req-0', 500, null],
      ['req-1', 400, 'encoding_format'],
    ]);
    expect(mock.stats.batch.lines - before).toBe(1);
    await stack.waitNoHolds(t.tenantId, 20_000);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n);
    expect((await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId])).rows[0].n).toBe(0);
    await expectBalanceEqualsLedger(stack, t.tenantId);
  }, 60_000);
});

describe('vendor batch mode: /v1/completions', () => {
  it('a legacy completions batch of a model with legacy_completions goes to the vendor: text_completion lines, each billed once at the batch prices', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = { ...mock.stats.batch };
    const body = { model: 'vbatch-ep/instruct', prompt: 'Say this is a test', max_tokens: 16 };
    const h = await holdOf(completions as Protocol<ParsedRequest>, body);
    const created = await create(
      client,
      '/v1/completions',
      Array.from({ length: 3 }, (_, i) => lineOf('/v1/completions', i, body)),
    );
    const b = await ended(client, created.id);
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    expect(await chunksOf(b.id)).toEqual([3]);
    expect(mock.stats.batch.batches - before.batches).toBe(1);
    // the cap the hold paid for, not streamed
    expect(mock.stats.lastBody).toEqual({ model: 'gpt-3.5-turbo-instruct', prompt: 'Say this is a test', max_tokens: 16 });
    const output = await contentLines(client, b.output_file_id);
    expect(
      output.map((l) => [l.custom_id, l.response?.status_code, l.response?.body.object, l.response?.body.model, l.response?.body.usage?.completion_tokens]),
    ).toEqual(Array.from({ length: 3 }, (_, i) => [`req-${i}`, 200, 'text_completion', 'vbatch-ep/instruct', 4]));
    const total = await expectBilled(t.tenantId, 10_000_000n, b.id, output);
    expect(total).toBeLessThan(3n * h);
  }, 60_000);

  it('a completions batch of a model without legacy /completions runs in queue mode (translated to chat), not at the vendor', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = mock.stats.batch.batches;
    const created = await create(client, '/v1/completions', [
      lineOf('/v1/completions', 0, { model: 'vbatch-ep/chat', prompt: 'Say this is a test', max_tokens: 8 }),
    ]);
    const b = await ended(client, created.id);
    expect(b.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
    expect(await chunksOf(b.id)).toEqual([]);
    expect(mock.stats.batch.batches - before).toBe(0);
    expect((await stack.db.query<{ mode: string }>('select mode from batches where id = $1', [b.id])).rows[0].mode).not.toBe('vendor');
  }, 60_000);
});
