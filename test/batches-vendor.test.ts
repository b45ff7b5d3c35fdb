import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { costMicros, formatBrl, holdPrices, type Prices } from '../src/billing/money.ts';
import { catalogEntry } from '../src/catalog/catalog.ts';
import { getModel, listDeployments, upsertModel } from '../src/db/models.ts';
import { outputTokens } from '../src/gateway/hold.ts';
import { chat } from '../src/protocols/chat/index.ts';
import { expectBalanceEqualsLedger } from './helpers/ledger.ts';
import { startStackWithVendor, stopProcess, type TestStack } from './helpers/stack.ts';
import { balanceOf as balanceOfTenant, batchEnded, expectBatchBilled, fileLines } from './helpers/batches.ts';

// `vendor` batch mode (docs/batch.md "vendor mode"): a batch naming a model whose deployment is in
// vendor mode goes to that deployment's own OpenAI Batch API (the mock vendor), through a worker of
// the model's pool; each line is held at the deployment's batch prices before its chunk is
// submitted, and each line the vendor answered is debited once at them. Models of their own (vbatch/…).

const UPSTREAM_KEY = 'sk-vendor-batch-test';
let stack: TestStack;
let mock: MockUpstream;

// BRL 1 and 2 per 1M tokens online; the batch prices half (1 µBRL = 2 tokens of input)
const ONLINE: Prices = { input: 1_000_000n, output: 2_000_000n };
const BATCH: Prices = { input: 500_000n, output: 1_000_000n };

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, {
    pools: 'sim,openai,anthropic',
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
    max_output_tokens: 64,
    context_length: 4096,
    batch_mode: 'vendor' as const,
  };
  await upsertModel(stack.db, { id: 'vbatch/gpt', upstream_model: 'mock-gpt', ...common });
  await upsertModel(stack.db, { id: 'vbatch/refusing', upstream_model: 'mock-400', ...common });
  await upsertModel(stack.db, {
    id: 'vbatch/long',
    upstream_model: 'mock-gpt',
    ...common,
    max_output_tokens: 4096,
    context_length: 1_000_000,
    extra_params: ['mock'],
  });
  const claude = { ...common, pool: 'anthropic', protocol: 'anthropic' as const };
  await upsertModel(stack.db, { id: 'vbatch/claude', upstream_model: 'mock-claude', ...claude });
  await upsertModel(stack.db, { id: 'vbatch/claude-overloaded', upstream_model: 'mock-claude-overloaded', ...claude });
  await upsertModel(stack.db, {
    id: 'vbatch/none',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: 1_000_000n,
    output_price: 2_000_000n,
    batch_mode: 'none',
  });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.urlOf(stack.gateways[0]), apiKey: key, maxRetries: 0 });

interface ResultLine {
  custom_id: string;
  response: {
    status_code: number;
    request_id: string;
    body: Record<string, unknown> & { usage?: { prompt_tokens: number; completion_tokens: number } };
  } | null;
  error: { code: string } | null;
}

/** The error body of a line answered with an error. */
const errorOf = (l: ResultLine) => (l.response?.body as { error: { code: string; param: string } } | undefined)?.error ?? { code: null, param: null };

const TEXT = 'hello vendor batch';
const chatLine = (i: number, model = 'vbatch/gpt', body: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: TEXT }], ...body } });

async function create(client: OpenAI, lines: string[]) {
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

const ended = batchEnded;
const contentLines = (client: OpenAI, fileId: string | null | undefined) => fileLines<ResultLine>(client, fileId);

const balanceOf = (tenantId: string) => balanceOfTenant(stack, tenantId);

/** The worst case a line of `max_tokens` is held for: its prompt bound and that cap at the batch prices. */
async function holdOf(maxTokens: number): Promise<bigint> {
  const m = catalogEntry((await getModel(stack.db, 'vbatch/gpt'))!, await listDeployments(stack.db, 'vbatch/gpt'));
  const req = chat.parse({ model: 'vbatch/gpt', max_tokens: maxTokens, messages: [{ role: 'user', content: TEXT }] });
  return costMicros(chat.inputBound(req, m), outputTokens(chat.outputCap(req), m).wanted, holdPrices(BATCH));
}

/** An online request's hold (its max_tokens given: its worst case at the online prices). */
async function onlineHoldOf(maxTokens: number): Promise<bigint> {
  const m = catalogEntry((await getModel(stack.db, 'vbatch/gpt'))!, await listDeployments(stack.db, 'vbatch/gpt'));
  const req = chat.parse({ model: 'vbatch/gpt', max_tokens: maxTokens, messages: [{ role: 'user', content: TEXT }] });
  return costMicros(chat.inputBound(req, m), outputTokens(chat.outputCap(req), m).wanted, holdPrices(ONLINE));
}

/** Each answered line debited once at the batch prices (its vendor's usage), batch_id recorded; no hold left; balance = ledger. */
const expectBilled = (tenantId: string, granted: bigint, batchId: string, answered: ResultLine[]) =>
  expectBatchBilled(stack, tenantId, granted, batchId, answered, BATCH);

const chunksOf = async (batchId: string) =>
  (
    await stack.db.query<{ n: number; vendor_batch_id: string }>(
      'select array_length(lines, 1) as n, vendor_batch_id from vendor_batch_chunks where batch_id = $1 order by chunk',
      [batchId],
    )
  ).rows;

describe('vendor batch mode (OpenAI Batch API)', () => {
  it("the openai SDK's batch goes to the vendor's Batch API: a file and a batch there, each line billed once at the batch prices, the vendor's discount", async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = { ...mock.stats.batch };
    const created = await create(
      client,
      Array.from({ length: 5 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 16 })),
    );
    expect(created.status).toBe('in_progress');
    const b = await ended(client, created.id);
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 5, completed: 5, failed: 0 });
    expect(b.error_file_id).toBeNull();
    const output = await contentLines(client, b.output_file_id);
    expect(output.map((l) => [l.custom_id, l.response?.status_code, l.response?.body.model, l.response?.body.usage?.completion_tokens])).toEqual(
      Array.from({ length: 5 }, (_, i) => [`req-${i}`, 200, 'vbatch/gpt', 4]),
    );
    // the vendor got one file and one batch of five lines, and billed them at its 50 % batch discount
    expect(mock.stats.batch.files - before.files).toBe(1);
    expect(mock.stats.batch.batches - before.batches).toBe(1);
    expect(mock.stats.batch.succeeded - before.succeeded).toBe(5);
    const prompt = output.reduce((s, l) => s + l.response!.body.usage!.prompt_tokens, 0);
    expect(mock.stats.batch.prompt_tokens - before.prompt_tokens).toBe(prompt);
    expect(mock.stats.batch.billed_completion_tokens - before.billed_completion_tokens).toBe(10);
    expect(mock.stats.batch.billed_prompt_tokens - before.billed_prompt_tokens).toBe(prompt / 2);
    // what the vendor was sent: the upstream model, the cap the hold paid for, not streamed
    expect((await chunksOf(b.id)).map((c) => c.n)).toEqual([5]);
    expect(mock.stats.lastBody).toEqual({ model: 'mock-gpt', messages: [{ role: 'user', content: TEXT }], max_tokens: 16 });
    await expectBilled(t.tenantId, 10_000_000n, b.id, output);
    // remembered as a vendor-mode batch for the console's margin (migration 091), beyond the batch's retention
    expect((await stack.db.query('select batch_id from vendor_batch_ids where batch_id = $1', [b.id])).rows).toEqual([{ batch_id: b.id }]);
    // /v1/generation of a line: a batch line of this batch
    const gen = await fetch(`${stack.urlOf(stack.gateways[0])}/generation?id=${output[0].response!.request_id}`, {
      headers: { authorization: `Bearer ${t.key}` },
    });
    expect(((await gen.json()) as { data: { batch_id: string } }).data.batch_id).toBe(b.id);
  }, 60_000);

  it('a balance that covers part: chunks of exactly the lines it covers, the rest a later chunk, then 402 once nothing runs', async () => {
    const h = await holdOf(64);
    const vendorBatches = mock.stats.batch.batches;
    // each line holds h (64 output tokens) but costs far less (the vendor answers 4 tokens): the
    // first chunk is the 2 lines 2.5 h covers; what they cost less than h comes back for the next
    const granted = (h * 5n) / 2n;
    const t = await stack.tenant((Number(granted) / 1e6).toFixed(6));
    expect(await balanceOf(t.tenantId)).toBe(granted);
    const client = clientOf(t.key);
    const created = await create(
      client,
      Array.from({ length: 8 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 64 })),
    );
    const b = await ended(client, created.id);
    const output = await contentLines(client, b.output_file_id);
    const errors = await contentLines(client, b.error_file_id);
    expect(output.length).toBeGreaterThan(0);
    const c = costMicros(output[0].response!.body.usage!.prompt_tokens, 4, BATCH);
    // the same rule, simulated: each chunk takes floor(available / h) lines; 402 once none fits with nothing running
    const expected: number[] = [];
    let available = granted;
    let left = 8;
    while (left > 0) {
      const n = Math.min(left, Number(available / h));
      if (n === 0) break;
      expected.push(n);
      available -= BigInt(n) * c;
      left -= n;
    }
    expect(expected[0]).toBe(2);
    expect((await chunksOf(b.id)).map((x) => x.n)).toEqual(expected);
    expect(mock.stats.batch.batches - vendorBatches).toBe(expected.length);
    const ran = expected.reduce((a, n) => a + n, 0);
    expect(b.request_counts).toEqual({ total: 8, completed: ran, failed: 8 - ran });
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: ran }, (_, i) => `req-${i}`));
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, errorOf(l).code])).toEqual(
      Array.from({ length: 8 - ran }, (_, i) => [`req-${ran + i}`, 402, 'insufficient_balance']),
    );
    const total = await expectBilled(t.tenantId, granted, b.id, output);
    expect(total).toBe(BigInt(ran) * c);
  }, 60_000);

  it("lines still waiting when the batch's 24 h window passes end batch_expired: the batch expired, what ran billed", async () => {
    const h = await holdOf(64);
    const granted = (h * 5n) / 2n; // covers the first chunk (2 lines) only
    const t = await stack.tenant((Number(granted) / 1e6).toFixed(6));
    const client = clientOf(t.key);
    mock.batchTiming.lineMs = 300;
    try {
      const created = await create(
        client,
        Array.from({ length: 5 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 64 })),
      );
      expect((await chunksOf(created.id)).map((c) => c.n)).toEqual([2]);
      // the window passes while the vendor runs the first chunk
      await stack.db.query("update batches set expires_at = now() - interval '1 second' where id = $1", [created.id]);
      const b = await ended(client, created.id);
      expect(b.status).toBe('expired');
      expect(b.expired_at).not.toBeNull();
      expect(b.request_counts).toEqual({ total: 5, completed: 2, failed: 0 });
      expect((await chunksOf(created.id)).map((c) => c.n)).toEqual([2]);
      const errors = await contentLines(client, b.error_file_id);
      expect(errors.map((l) => [l.custom_id, l.response, l.error?.code])).toEqual([
        ['req-2', null, 'batch_expired'],
        ['req-3', null, 'batch_expired'],
        ['req-4', null, 'batch_expired'],
      ]);
      await expectBilled(t.tenantId, granted, b.id, await contentLines(client, b.output_file_id));
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  }, 60_000);

  it('a chunk whose results outgrow one NATS message comes back in pages: every line mapped and billed once', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    // 100 answers of 2 000 tokens (some 12 KB each): more than NATS takes in one message (1 MiB), so several pages (512 KiB)
    const created = await create(
      client,
      Array.from({ length: 100 }, (_, i) => chatLine(i, 'vbatch/long', { max_tokens: 2000, mock: { output_tokens: 2000 } })),
    );
    const b = await ended(client, created.id);
    expect(b.request_counts).toEqual({ total: 100, completed: 100, failed: 0 });
    const output = await contentLines(client, b.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 100 }, (_, i) => `req-${i}`));
    expect(Buffer.byteLength(output.map((l) => JSON.stringify(l.response?.body)).join(''))).toBeGreaterThan(1024 * 1024);
    expect(output.every((l) => l.response?.body.usage?.completion_tokens === 2000)).toBe(true);
    await expectBilled(t.tenantId, 10_000_000n, b.id, output);
  }, 60_000);

  it('a chunk is bounded in bytes too (one NATS message to the worker): large lines split into several vendor batches', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = mock.stats.batch.batches;
    const big = 'lorem ipsum '.repeat(25_000); // some 300 KB a line: two fit in a chunk's 768 KiB, not three
    const created = await create(
      client,
      Array.from({ length: 3 }, (_, i) =>
        JSON.stringify({
          custom_id: `req-${i}`,
          method: 'POST',
          url: '/v1/chat/completions',
          body: { model: 'vbatch/long', max_tokens: 8, messages: [{ role: 'user', content: big }] },
        }),
      ),
    );
    const b = await ended(client, created.id);
    expect(b.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    expect((await chunksOf(b.id)).map((c) => c.n)).toEqual([2, 1]);
    expect(mock.stats.batch.batches - before).toBe(2);
    await expectBilled(t.tenantId, 10_000_000n, b.id, await contentLines(client, b.output_file_id));
  }, 60_000);

  it('cancel mid-batch goes to the vendor: only the lines it ran are billed, the others batch_cancelled', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    mock.batchTiming.lineMs = 250;
    try {
      const before = mock.stats.batch.lines;
      const created = await create(
        client,
        Array.from({ length: 8 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 16 })),
      );
      for (let i = 0; i < 200 && mock.stats.batch.lines - before < 2; i++) await new Promise((r) => setTimeout(r, 25));
      const cancelling = await client.batches.cancel(created.id);
      expect(cancelling.status).toBe('cancelling');
      const b = await ended(client, created.id);
      expect(b.status).toBe('cancelled');
      const output = await contentLines(client, b.output_file_id);
      const errors = await contentLines(client, b.error_file_id);
      const ran = output.length;
      expect(ran).toBeGreaterThanOrEqual(2);
      expect(ran).toBeLessThan(8);
      expect(ran).toBe(mock.stats.batch.lines - before);
      expect(b.request_counts).toEqual({ total: 8, completed: ran, failed: 0 });
      expect(errors.map((l) => [l.custom_id, l.response, l.error?.code])).toEqual(
        Array.from({ length: 8 - ran }, (_, i) => [`req-${ran + i}`, null, 'batch_cancelled']),
      );
      await expectBilled(t.tenantId, 10_000_000n, b.id, output);
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  }, 60_000);

  it('a front door killed (kill -9) while the vendor runs the batch: another door resumes polling from PostgreSQL, each line billed once', async () => {
    const t = await stack.tenant('10');
    const before = { ...mock.stats.batch };
    mock.batchTiming.lineMs = 200;
    try {
      const created = await create(
        clientOf(t.key),
        Array.from({ length: 5 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 16 })),
      );
      // the chunk was submitted (its vendor batch id stored) before create answered
      expect((await chunksOf(created.id)).map((c) => [c.n, c.vendor_batch_id !== null])).toEqual([[5, true]]);
      // each line is held, and its hold outlives the vendor's 24 h window: the sweeper cannot release it while the vendor runs
      const { rows: holds } = await stack.db.query<{ n: number; least_hours: number }>(
        "select count(*)::int as n, extract(epoch from min(expires_at) - now()) / 3600 as least_hours from holds where tenant_id = $1 and kind = 'batch'",
        [t.tenantId],
      );
      expect(holds[0].n).toBe(5);
      expect(Number(holds[0].least_hours)).toBeGreaterThan(24.9);
      const [old] = stack.gateways.splice(0, 1);
      await stopProcess(old, 'SIGKILL'); // kill -9: whatever it was doing, another door takes the batch over (its claim lapses within 60 s)
      const door = await stack.spawnGateway();
      const client = new OpenAI({ baseURL: stack.urlOf(door), apiKey: t.key, maxRetries: 0 });
      const b = await ended(client, created.id, 90_000);
      expect(b.status).toBe('completed');
      expect(b.request_counts).toEqual({ total: 5, completed: 5, failed: 0 });
      expect(mock.stats.batch.batches - before.batches).toBe(1);
      expect(mock.stats.batch.succeeded - before.succeeded).toBe(5);
      await expectBilled(t.tenantId, 10_000_000n, b.id, await contentLines(client, b.output_file_id));
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  }, 150_000);

  it("a door that dies after the vendor took a chunk, before storing the vendor's id: the chunk is found at the vendor by its metadata and adopted, not run twice", async () => {
    const t = await stack.tenant('10');
    expect(t.tenantId).toMatch(/^[\w-]+$/);
    const before = { ...mock.stats.batch };
    // the crash window: the first store of a vendor batch id for this tenant's batch fails (as if
    // the door had died right after the worker's submit); the loop then takes the chunk again
    await stack.db.query('create sequence if not exists test_vendor_store_fails');
    await stack.db.query(`create or replace function test_vendor_store_fails_once() returns trigger language plpgsql security definer as $$
      begin
        if new.vendor_batch_id is not null and old.vendor_batch_id is null then
          if exists (select 1 from batches b where b.id = new.batch_id and b.tenant_id = '${t.tenantId}') then
            if nextval('test_vendor_store_fails') = 1 then
              raise exception 'injected: the door stopped before storing the vendor batch id';
            end if;
          end if;
        end if;
        return new;
      end $$`);
    await stack.db.query(
      'create trigger test_vendor_store_fails_once before update on vendor_batch_chunks for each row execute function test_vendor_store_fails_once()',
    );
    try {
      const client = clientOf(t.key);
      const created = await create(
        client,
        Array.from({ length: 4 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 16 })),
      );
      const b = await ended(client, created.id);
      expect(b.status).toBe('completed');
      expect(b.request_counts).toEqual({ total: 4, completed: 4, failed: 0 });
      // two stores of the vendor's id: the first failed, the second (the adopted batch's) held
      expect((await stack.db.query('select last_value::int as n from test_vendor_store_fails')).rows[0]).toEqual({ n: 2 });
      // the vendor got one batch, named after the chunk, and ran each line once; the list was read to find it
      expect(mock.stats.batch.batches - before.batches).toBe(1);
      expect(mock.stats.batch.succeeded - before.succeeded).toBe(4);
      expect(mock.stats.batch.batchLists - before.batchLists).toBe(1);
      const listed = (await (await fetch(`${mock.url}/batches?limit=100`, { headers: { authorization: `Bearer ${UPSTREAM_KEY}` } })).json()) as {
        data: Array<{ id: string; metadata: Record<string, string> | null }>;
      };
      const named = listed.data.filter((x) => x.metadata?.catraca_chunk === `${created.id}:0`);
      expect(named.map((x) => x.id)).toEqual((await chunksOf(created.id)).map((c) => c.vendor_batch_id));
      expect(named.map((x) => x.metadata)).toEqual([{ catraca: 'vendor-mode', catraca_chunk: `${created.id}:0` }]);
      await expectBilled(t.tenantId, 10_000_000n, b.id, await contentLines(client, b.output_file_id));
    } finally {
      await stack.db.query('drop trigger if exists test_vendor_store_fails_once on vendor_batch_chunks');
    }
  }, 60_000);

  it('a line the vendor answers with an error is an error line: its hold goes back, nothing charged', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const created = await create(client, [chatLine(0, 'vbatch/refusing', { max_tokens: 8 }), chatLine(1, 'vbatch/refusing', { max_tokens: 8 })]);
    const b = await ended(client, created.id);
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
    expect(b.output_file_id).toBeNull();
    const errors = await contentLines(client, b.error_file_id);
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, errorOf(l).param])).toEqual([
      ['req-0', 400, 'max_tokens'],
      ['req-1', 400, 'max_tokens'],
    ]);
    await stack.waitNoHolds(t.tenantId, 20_000);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n);
    expect((await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [t.tenantId])).rows[0].n).toBe(0);
    await expectBalanceEqualsLedger(stack, t.tenantId);
  }, 60_000);

  it('a line this gateway refuses (another model, a bad body) is an error line before the vendor sees it', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const before = mock.stats.batch.lines;
    const created = await create(client, [chatLine(0), chatLine(1, 'vbatch/refusing'), chatLine(2, 'vbatch/gpt', { max_tokens: 'many' })]);
    const b = await ended(client, created.id);
    expect(b.request_counts).toEqual({ total: 3, completed: 1, failed: 2 });
    const errors = await contentLines(client, b.error_file_id);
    expect(errors.map((l) => [l.custom_id, l.response?.status_code, errorOf(l).code])).toEqual([
      ['req-1', 400, 'mismatched_model'],
      ['req-2', 400, 'invalid_request'],
    ]);
    expect(mock.stats.batch.lines - before).toBe(1);
    await expectBilled(t.tenantId, 10_000_000n, b.id, await contentLines(client, b.output_file_id));
  }, 60_000);
});

describe('vendor batch holds and the key limits', () => {
  it("a key with max_concurrent 1 running a vendor batch is still answered online: the batch's holds are no requests in flight, yet their money stays held", async () => {
    const h = await holdOf(64);
    const o16 = await onlineHoldOf(16);
    const o64 = await onlineHoldOf(64);
    expect(o64).toBeGreaterThan(o16);
    // the three lines' holds, and exactly one online request of 16 tokens more
    const vendorHeld = 3n * h;
    const granted = vendorHeld + o16;
    const t = await stack.tenant((Number(granted) / 1e6).toFixed(6), { maxConcurrent: 1 });
    const client = clientOf(t.key);
    mock.batchTiming.lineMs = 1000;
    try {
      const created = await create(
        client,
        Array.from({ length: 3 }, (_, i) => chatLine(i, 'vbatch/gpt', { max_tokens: 64 })),
      );
      expect((await chunksOf(created.id)).map((c) => [c.n, c.vendor_batch_id !== null])).toEqual([[3, true]]);
      const { rows: holds } = await stack.db.query<{ kind: string; n: number; held: string }>(
        'select kind, count(*)::int as n, sum(amount_micros)::text as held from holds where tenant_id = $1 group by kind',
        [t.tenantId],
      );
      expect(holds).toEqual([{ kind: 'batch', n: 3, held: String(vendorHeld) }]);
      const messages = [{ role: 'user' as const, content: TEXT }];
      // not 429 concurrency_limited: 402, what is available being the balance less the vendor holds
      const refused = await client.chat.completions.create({ model: 'vbatch/gpt', max_tokens: 64, messages }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(OpenAI.APIError);
      const err = refused as InstanceType<typeof OpenAI.APIError>;
      expect([err.status, err.code]).toEqual([402, 'insufficient_balance']);
      expect(err.message).toContain(`with your available balance of R$ ${formatBrl(granted - vendorHeld)}.`);
      // one that fits in it is answered while the vendor still runs the batch
      const answered = await client.chat.completions.create({ model: 'vbatch/gpt', max_tokens: 16, messages });
      expect(answered.usage?.completion_tokens).toBe(4);
      expect((await client.batches.retrieve(created.id)).status).toBe('in_progress');
      const b = await ended(client, created.id);
      expect(b.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
      const output = await contentLines(client, b.output_file_id);
      await stack.waitSettled(
        output.map((l) => l.response!.request_id),
        20_000,
      );
      await stack.waitNoHolds(t.tenantId, 20_000);
      const batchCost = output.reduce((s, l) => s + costMicros(l.response!.body.usage!.prompt_tokens, l.response!.body.usage!.completion_tokens, BATCH), 0n);
      const onlineCost = costMicros(answered.usage!.prompt_tokens, answered.usage!.completion_tokens, ONLINE);
      const { rows: debits } = await stack.db.query<{ n: number; sum: string }>(
        "select count(*)::int as n, sum(amount_micros)::text as sum from ledger where tenant_id = $1 and kind = 'debit'",
        [t.tenantId],
      );
      expect(debits[0]).toEqual({ n: 4, sum: String(batchCost + onlineCost) });
      expect(await balanceOf(t.tenantId)).toBe(granted - batchCost - onlineCost);
      await expectBalanceEqualsLedger(stack, t.tenantId);
      expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  }, 60_000);
});

describe("vendor batch mode (Anthropic's Message Batches)", () => {
  const anthropicOf = (key: string) => new Anthropic({ baseURL: stack.urlOf(stack.gateways[0]).replace(/\/v1$/, ''), apiKey: key, maxRetries: 0 });
  const request = (i: number, model = 'vbatch/claude') => ({
    custom_id: `req-${i}`,
    params: { model, max_tokens: 16, messages: [{ role: 'user' as const, content: `${TEXT} ${i}` }] },
  });

  async function endedMessageBatch(client: Anthropic, id: string) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const b = await client.messages.batches.retrieve(id);
      if (b.processing_status === 'ended') return b;
      if (Date.now() > deadline) throw new Error(`message batch ${id} still ${b.processing_status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it("the @anthropic-ai/sdk's message batch goes to the vendor's Message Batches API: each succeeded request billed once at the batch prices", async () => {
    const t = await stack.tenant('10');
    const client = anthropicOf(t.key);
    const before = { ...mock.stats.batch };
    const created = await client.messages.batches.create({ requests: [request(0), request(1), request(2), request(3, 'vbatch/gpt')] });
    expect(created.processing_status).toBe('in_progress');
    const b = await endedMessageBatch(client, created.id);
    expect(b.request_counts).toEqual({ processing: 0, succeeded: 3, errored: 1, canceled: 0, expired: 0 });
    const results = [];
    for await (const r of await client.messages.batches.results(created.id)) results.push(r);
    expect(results.map((r) => [r.custom_id, r.result.type])).toEqual([
      ['req-0', 'succeeded'],
      ['req-1', 'succeeded'],
      ['req-2', 'succeeded'],
      ['req-3', 'errored'],
    ]);
    // the vendor got one message batch of the three requests of its model
    expect(mock.stats.batch.messageBatches - before.messageBatches).toBe(1);
    expect(mock.stats.batch.succeeded - before.succeeded).toBe(3);
    const { rows } = await stack.db.query<{
      line: number;
      request_id: string;
      body: { model: string; usage: { input_tokens: number; output_tokens: number } };
    }>('select line, request_id, body from batch_results where batch_id = $1 and ok order by line', [created.id]);
    expect(rows.map((r) => r.body.model)).toEqual(['vbatch/claude', 'vbatch/claude', 'vbatch/claude']);
    await stack.waitSettled(
      rows.map((r) => r.request_id),
      20_000,
    );
    await stack.waitNoHolds(t.tenantId, 20_000);
    const { rows: debits } = await stack.db.query<{ request_id: string; amount_micros: string; batch_id: string }>(
      "select request_id, amount_micros, batch_id from ledger where tenant_id = $1 and kind = 'debit'",
      [t.tenantId],
    );
    const byId = new Map(debits.map((d) => [d.request_id, BigInt(d.amount_micros)]));
    let total = 0n;
    for (const r of rows) {
      const cost = costMicros(r.body.usage.input_tokens, r.body.usage.output_tokens, BATCH);
      expect(byId.get(r.request_id)).toBe(cost);
      total += cost;
    }
    expect(debits.length).toBe(3);
    expect(new Set(debits.map((d) => d.batch_id))).toEqual(new Set([created.id]));
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n - total);
    await expectBalanceEqualsLedger(stack, t.tenantId);
    expect((await stack.db.query('select batch_id from vendor_batch_ids where batch_id = $1', [created.id])).rows).toEqual([{ batch_id: created.id }]);
  }, 60_000);

  it('cancel mid-batch goes to the vendor: the requests it ran are billed, the others canceled', async () => {
    const t = await stack.tenant('10');
    const client = anthropicOf(t.key);
    mock.batchTiming.lineMs = 250;
    try {
      const before = mock.stats.batch.lines;
      const created = await client.messages.batches.create({ requests: Array.from({ length: 8 }, (_, i) => request(i)) });
      for (let i = 0; i < 200 && mock.stats.batch.lines - before < 2; i++) await new Promise((r) => setTimeout(r, 25));
      expect((await client.messages.batches.cancel(created.id)).processing_status).toBe('canceling');
      const b = await endedMessageBatch(client, created.id);
      const ran = mock.stats.batch.lines - before;
      expect(ran).toBeGreaterThanOrEqual(2);
      expect(ran).toBeLessThan(8);
      expect(b.request_counts).toEqual({ processing: 0, succeeded: ran, errored: 0, canceled: 8 - ran, expired: 0 });
      const results = [];
      for await (const r of await client.messages.batches.results(created.id)) results.push(r);
      expect(results.map((r) => r.result.type)).toEqual([...Array(ran).fill('succeeded'), ...Array(8 - ran).fill('canceled')]);
      const { rows } = await stack.db.query<{ request_id: string; body: { usage: { input_tokens: number; output_tokens: number } } }>(
        'select request_id, body from batch_results where batch_id = $1 and ok order by line',
        [created.id],
      );
      await stack.waitSettled(
        rows.map((r) => r.request_id),
        20_000,
      );
      await stack.waitNoHolds(t.tenantId, 20_000);
      const total = rows.reduce((s, r) => s + costMicros(r.body.usage.input_tokens, r.body.usage.output_tokens, BATCH), 0n);
      expect(await balanceOf(t.tenantId)).toBe(10_000_000n - total);
      await expectBalanceEqualsLedger(stack, t.tenantId);
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  }, 60_000);

  it('requests the vendor answers with an error are errored, nothing charged', async () => {
    const t = await stack.tenant('10');
    const client = anthropicOf(t.key);
    const created = await client.messages.batches.create({ requests: [request(0, 'vbatch/claude-overloaded'), request(1, 'vbatch/claude-overloaded')] });
    const b = await endedMessageBatch(client, created.id);
    expect(b.request_counts).toEqual({ processing: 0, succeeded: 0, errored: 2, canceled: 0, expired: 0 });
    const results = [];
    for await (const r of await client.messages.batches.results(created.id)) results.push(r);
    expect(results.map((r) => [r.custom_id, r.result.type === 'errored' ? r.result.error.error.type : r.result.type])).toEqual([
      ['req-0', 'overloaded_error'],
      ['req-1', 'overloaded_error'],
    ]);
    await stack.waitNoHolds(t.tenantId, 20_000);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n);
    await expectBalanceEqualsLedger(stack, t.tenantId);
  }, 60_000);
});

describe('batch mode none', () => {
  it('a line naming a model whose deployment takes no batches is an error line batch_not_supported, nothing charged', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const created = await create(client, [chatLine(0, 'vbatch/none', { max_tokens: 8 })]);
    const b = await ended(client, created.id);
    expect(b.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
    const errors = await contentLines(client, b.error_file_id);
    expect(errors.map((l) => [l.response?.status_code, errorOf(l).code])).toEqual([[400, 'batch_not_supported']]);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n);
    // a queue-mode batch: not a vendor-mode one for the console's margin
    expect((await stack.db.query('select batch_id from vendor_batch_ids where batch_id = $1', [b.id])).rows).toEqual([]);
  }, 60_000);
});
