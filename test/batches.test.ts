import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { brlNumber, costMicros } from '../src/billing/money.ts';
import { SIM_PRICES, startStack, type TestStack } from './helpers/stack.ts';

// OpenAI's Batch API in `queue` mode through the whole stack with the real `openai` SDK:
// files.create with a JSONL, batches.create, poll, files.content of the output and error files.
// Every line that answered is debited once, exactly its usage at the model's price; the balance is
// the ledger's (ledgerCheck for the tenant); a bad line is an error line; a balance that runs out
// fails the remaining lines with 402 and never goes below zero; a cancel stops the lines not run.

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_CONCURRENCY: '4' } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

type Body = Record<string, unknown>;
const chatLine = (i: number, body: Body = {}) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'sim/echo', max_tokens: 16, messages: [{ role: 'user', content: `hello number ${i}` }], ...body },
  });

interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: Body & { usage?: { prompt_tokens: number; completion_tokens: number } } } | null;
  error: { code: string; message: string } | null;
}

async function runBatch(client: OpenAI, lines: string[]) {
  const file = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { run: 'test' } });
  return { file, batch };
}

async function waitEnded(client: OpenAI, id: string, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) {
      const { rows } = await stack.db.query(
        'select count(*)::int as n, count(*) filter (where ok is null)::int as running from batch_results where batch_id = $1',
        [id],
      );
      throw new Error(`batch ${id} still ${b.status}: ${JSON.stringify(b.request_counts)} results ${JSON.stringify(rows[0])}`);
    }
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

async function debitsOf(requestIds: string[]): Promise<Map<string, bigint>> {
  const { rows } = await stack.db.query("select request_id, amount_micros from ledger where kind = 'debit' and request_id = any($1)", [requestIds]);
  return new Map(
    rows.map((r: { request_id: string; amount_micros: bigint }) => [
      r.request_id,
      -BigInt(r.amount_micros) < 0n ? BigInt(r.amount_micros) : -BigInt(r.amount_micros),
    ]),
  );
}

/** Each answered line debited exactly once, its usage at sim/echo's price; the balance what the grant less those debits leaves. */
async function expectBilledExactly(tenantId: string, granted: bigint, ok: ResultLine[]) {
  const ids = ok.map((l) => l.response?.request_id as string);
  await stack.waitSettled(ids, 20_000);
  await stack.waitNoHolds(tenantId, 20_000);
  const debits = await debitsOf(ids);
  expect(debits.size).toBe(ok.length);
  let total = 0n;
  for (const l of ok) {
    const usage = l.response?.body.usage as { prompt_tokens: number; completion_tokens: number };
    const cost = costMicros(usage.prompt_tokens, usage.completion_tokens, SIM_PRICES.echo);
    expect(debits.get(l.response?.request_id as string)).toBe(cost);
    total += cost;
  }
  const { rows } = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [tenantId]);
  expect(rows[0].n).toBe(ok.length);
  expect(await balanceOf(tenantId)).toBe(granted - total);
  expect((await ledgerCheck(stack.db, { tenantId })).ok).toBe(true);
}

describe('Batch API, queue mode', () => {
  it('runs 300 chat lines, each billed once, exactly; output in OpenAI line format; list and retrieve', async () => {
    const t = await stack.tenant('100');
    const client = clientOf(t.key);
    const { file, batch } = await runBatch(
      client,
      Array.from({ length: 300 }, (_, i) => chatLine(i)),
    );
    expect(batch).toMatchObject({
      object: 'batch',
      endpoint: '/v1/chat/completions',
      input_file_id: file.id,
      completion_window: '24h',
      status: 'in_progress',
      request_counts: { total: 300, completed: 0, failed: 0 },
      metadata: { run: 'test' },
      output_file_id: null,
      error_file_id: null,
    });
    expect(batch.id).toMatch(/^batch_[0-9a-f]{24}$/);
    const ended = await waitEnded(client, batch.id);
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: 300, completed: 300, failed: 0 });
    expect(ended.error_file_id).toBeNull();
    expect(ended.completed_at).toEqual(expect.any(Number));
    const output = await contentLines(client, ended.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 300 }, (_, i) => `req-${i}`));
    for (const l of output) {
      expect(l.error).toBeNull();
      expect(l.response?.status_code).toBe(200);
      expect(l.response?.body.object).toBe('chat.completion');
      expect(l.response?.request_id).toMatch(/^gen-/);
    }
    expect(output[0].id).toBe(`batch_req_${batch.id.slice(6)}_1`);
    await expectBilledExactly(t.tenantId, 100_000_000n, output);
    // each line's ledger row records its batch (ledger.batch_id, migration 084)
    const { rows: lineBatches } = await stack.db.query("select distinct batch_id from ledger where kind = 'debit' and request_id = any($1)", [
      output.map((l) => l.response?.request_id as string),
    ]);
    expect(lineBatches).toEqual([{ batch_id: batch.id }]);
    // /generation of a line's request id says it was a batch line, and which
    const first = output[0].response as NonNullable<ResultLine['response']>;
    const firstUsage = first.body.usage as { prompt_tokens: number; completion_tokens: number };
    const gen = await (await fetch(`${stack.baseUrl}/generation?id=${first.request_id}`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    expect(gen.data).toMatchObject({
      id: first.request_id,
      batch: true,
      batch_id: batch.id,
      total_cost: brlNumber(costMicros(firstUsage.prompt_tokens, firstUsage.completion_tokens, SIM_PRICES.echo)),
    });
    // /activity shows the batch part of each day's usage: here all of it, 300 requests
    const activity = await (await fetch(`${stack.baseUrl}/activity`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    for (const row of activity.data) {
      expect(row.batch_usage).toBe(row.usage);
      expect(row.batch_requests).toBe(row.requests);
    }
    expect(activity.data.reduce((n: number, r: { batch_requests: number }) => n + r.batch_requests, 0)).toBe(300);
    // the output file is a file of the tenant's, purpose batch_output
    const outFile = await client.files.retrieve(ended.output_file_id as string);
    expect(outFile).toMatchObject({ purpose: 'batch_output', filename: `${batch.id}_output.jsonl` });
    const list = await client.batches.list({ limit: 1 });
    expect(list.data.map((b) => b.id)).toEqual([batch.id]);
    expect(list.has_more).toBe(false);
  }, 60_000);

  it('a bad line among good ones is an error line, never a failed batch', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const lines = [chatLine(0), chatLine(1, { model: 'sim/nope' }), chatLine(2, { messages: 'not a list' }), chatLine(3, { stream: true }), chatLine(4)];
    const { batch } = await runBatch(client, lines);
    const ended = await waitEnded(client, batch.id);
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: 5, completed: 2, failed: 3 });
    const output = await contentLines(client, ended.output_file_id);
    expect(output.map((l) => l.custom_id)).toEqual(['req-0', 'req-4']);
    const failed = await contentLines(client, ended.error_file_id);
    expect(failed.map((l) => [l.custom_id, l.response?.status_code, (l.response?.body.error as { code: string } | undefined)?.code])).toEqual([
      ['req-1', 404, 'model_not_found'],
      ['req-2', 400, 'invalid_request'],
      ['req-3', 400, 'invalid_request'],
    ]);
    await expectBilledExactly(t.tenantId, 10_000_000n, output);
  }, 60_000);

  it("the key's allowlist applies per line", async () => {
    const t = await stack.tenant('10', { models: ['sim/echo'] });
    const client = clientOf(t.key);
    const { batch } = await runBatch(client, [chatLine(0), chatLine(1, { model: 'sim/lorem' })]);
    const ended = await waitEnded(client, batch.id);
    expect(ended.request_counts).toEqual({ total: 2, completed: 1, failed: 1 });
    const failed = await contentLines(client, ended.error_file_id);
    expect(failed[0].response).toMatchObject({ status_code: 403, body: { error: { code: 'model_not_allowed' } } });
    await expectBilledExactly(t.tenantId, 10_000_000n, await contentLines(client, ended.output_file_id));
  }, 60_000);

  it('cancel mid-batch: lines not run are not run nor billed; the batch ends cancelled', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const slow = { sim: { first_token_ms: 150 } };
    const { batch } = await runBatch(
      client,
      Array.from({ length: 60 }, (_, i) => chatLine(i, slow)),
    );
    const deadline = Date.now() + 20_000;
    while ((await client.batches.retrieve(batch.id)).request_counts?.completed === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const cancelling = await client.batches.cancel(batch.id);
    expect(['cancelling', 'cancelled']).toContain(cancelling.status);
    const ended = await waitEnded(client, batch.id);
    expect(ended.status).toBe('cancelled');
    expect(ended.cancelled_at).toEqual(expect.any(Number));
    const output = await contentLines(client, ended.output_file_id);
    const failed = await contentLines(client, ended.error_file_id);
    expect(output.length).toBeGreaterThan(0);
    expect(output.length).toBeLessThan(60);
    expect(ended.request_counts).toEqual({ total: 60, completed: output.length, failed: 0 });
    expect(failed.length).toBe(60 - output.length);
    for (const l of failed) expect(l).toMatchObject({ response: null, error: { code: 'batch_cancelled' } });
    await expectBilledExactly(t.tenantId, 10_000_000n, output);
    expect((await refusal(client.batches.cancel(batch.id))).status).toBe(400);
  }, 60_000);

  it('expiry: the lines not run when the window passes are error lines; the batch ends expired', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const slow = { sim: { first_token_ms: 150 } };
    const { batch } = await runBatch(
      client,
      Array.from({ length: 60 }, (_, i) => chatLine(i, slow)),
    );
    expect(batch.expires_at).toBe((batch.created_at as number) + 24 * 3600);
    const deadline = Date.now() + 20_000;
    while ((await client.batches.retrieve(batch.id)).request_counts?.completed === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await stack.db.query("update batches set expires_at = now() - interval '1 second' where id = $1", [batch.id]);
    const ended = await waitEnded(client, batch.id);
    expect(ended.status).toBe('expired');
    expect(ended.expired_at).toEqual(expect.any(Number));
    expect(ended.completed_at).toBeNull();
    const output = await contentLines(client, ended.output_file_id);
    const failed = await contentLines(client, ended.error_file_id);
    expect(output.length).toBeGreaterThan(0);
    expect(output.length + failed.length).toBe(60);
    expect(ended.request_counts).toEqual({ total: 60, completed: output.length, failed: 0 });
    for (const l of failed) expect(l).toMatchObject({ response: null, error: { code: 'batch_expired' } });
    await expectBilledExactly(t.tenantId, 10_000_000n, output);
  }, 60_000);

  it('refuses a missing file, another endpoint, a bad window; another tenant sees nothing', async () => {
    const a = await stack.tenant('1');
    const b = await stack.tenant('1');
    const client = clientOf(a.key);
    const file = await client.files.create({ file: await toFile(Buffer.from(chatLine(0)), 'in.jsonl'), purpose: 'batch' });
    expect(await refusal(client.batches.create({ input_file_id: 'file-nope', endpoint: '/v1/chat/completions', completion_window: '24h' }))).toEqual({
      status: 404,
      error: { message: 'No such File object: file-nope', type: 'invalid_request_error', code: 'file_not_found', param: 'input_file_id' },
    });
    expect(await refusal(client.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }))).toMatchObject({
      status: 400,
      error: { code: 'mismatched_endpoint', param: 'input_file_id' },
    });
    expect((await refusal(client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '48h' as '24h' }))).status).toBe(
      400,
    );
    expect(await refusal(clientOf(b.key).batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }))).toMatchObject(
      {
        status: 404,
      },
    );
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(await refusal(clientOf(b.key).batches.retrieve(batch.id))).toEqual({
      status: 404,
      error: { message: `No batch found with id '${batch.id}'.`, type: 'invalid_request_error', code: 'batch_not_found', param: 'id' },
    });
    expect((await clientOf(b.key).batches.list()).data).toEqual([]);
    await waitEnded(client, batch.id);
  }, 60_000);
});

// One line at a time (BATCH_CONCURRENCY 1, one front door): which line the balance first refuses
// is the run's, but every line before it answered, every line after it is the batch's 402.
describe('Batch API, one line at a time: a balance that runs out mid-batch; the caps on batches in flight', () => {
  let main: TestStack;
  beforeAll(async () => {
    main = stack;
    stack = await startStack({ env: { BATCH_CONCURRENCY: '1', BATCH_MAX_IN_FLIGHT: '2', BATCH_MAX_LINES_IN_FLIGHT: '300' } });
  }, 60000);
  afterAll(async () => {
    const own = stack;
    stack = main;
    await own?.stop();
  });

  it('line N refused 402 for the balance: every later line 402 without running, never overspends, the batch completed', async () => {
    // a line holds (its prompt bound + 16 output tokens) at R$1/R$2 per 1M: some dozens of µBRL; R$ 0,002 covers some dozens of lines
    const t = await stack.tenant('0.002');
    const client = clientOf(t.key);
    const { batch } = await runBatch(
      client,
      Array.from({ length: 200 }, (_, i) => chatLine(i)),
    );
    const ended = await waitEnded(client, batch.id, 30_000);
    expect(ended.status).toBe('completed');
    const output = await contentLines(client, ended.output_file_id);
    const failed = await contentLines(client, ended.error_file_id);
    const n = output.length;
    expect(n).toBeGreaterThan(0);
    expect(n).toBeLessThan(200);
    // lines 0 … N-1 answered, line N refused by admission, N+1 … 199 never run
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: n }, (_, i) => `req-${i}`));
    expect(failed.map((l) => l.custom_id)).toEqual(Array.from({ length: 200 - n }, (_, i) => `req-${n + i}`));
    expect(ended.request_counts).toEqual({ total: 200, completed: n, failed: 200 - n });
    const [refused, ...notRun] = failed;
    expect(refused.error).toBeNull();
    expect(refused.response?.status_code).toBe(402);
    expect(refused.response?.request_id).toMatch(/^gen-/);
    expect(refused.response?.body).toEqual({
      error: { message: expect.stringMatching(/^This request requires more credits/), type: 'insufficient_quota', code: 'insufficient_balance', param: null },
    });
    expect(notRun.length).toBe(199 - n);
    for (const [i, l] of notRun.entries())
      expect(l).toEqual({
        id: `batch_req_${batch.id.slice(6)}_${n + 2 + i}`,
        custom_id: `req-${n + 1 + i}`,
        response: {
          status_code: 402,
          request_id: null,
          body: {
            error: {
              message: `The balance ran out during this batch: request 'req-${n}' was refused for it, and this request was not run. Top up, then submit the requests not run in a new batch.`,
              type: 'insufficient_quota',
              code: 'insufficient_balance',
              param: null,
            },
          },
        },
        error: null,
      });
    const { rows } = await stack.db.query('select out_of_balance_line, out_of_balance_at is not null as marked from batches where id = $1', [batch.id]);
    expect(rows).toEqual([{ out_of_balance_line: n, marked: true }]);
    // the refused line was never debited; the lines that ran exactly once each; balance = ledger, never below zero
    const { rows: refusedRows } = await stack.db.query('select count(*)::int as n from ledger where request_id = $1', [refused.response?.request_id]);
    expect(refusedRows[0].n).toBe(0);
    await expectBilledExactly(t.tenantId, 2_000n, output);
    expect(await balanceOf(t.tenantId)).toBeGreaterThanOrEqual(0n);
  }, 90_000);

  it('an Anthropic message batch whose balance runs out: request N errored billing_error, every later one errored without running', async () => {
    const t = await stack.tenant('0.001');
    const origin = stack.baseUrl.replace(/\/v1$/, '');
    const headers = { 'x-api-key': t.key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' };
    const requests = Array.from({ length: 100 }, (_, i) => ({
      custom_id: `req-${i}`,
      params: { model: 'sim/echo', max_tokens: 16, messages: [{ role: 'user', content: `hello number ${i}` }] },
    }));
    const created = await (await fetch(`${origin}/v1/messages/batches`, { method: 'POST', headers, body: JSON.stringify({ requests }) })).json();
    const deadline = Date.now() + 30_000;
    let b = created;
    while (b.processing_status !== 'ended') {
      if (Date.now() > deadline) throw new Error(`message batch ${created.id} still ${b.processing_status}`);
      await new Promise((r) => setTimeout(r, 200));
      b = await (await fetch(`${origin}/v1/messages/batches/${created.id}`, { headers })).json();
    }
    const results = (await (await fetch(`${origin}/v1/messages/batches/${created.id}/results`, { headers })).text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const n = results.filter((r: { result: { type: string } }) => r.result.type === 'succeeded').length;
    expect(n).toBeGreaterThan(0);
    expect(n).toBeLessThan(100);
    expect(b.request_counts).toEqual({ processing: 0, succeeded: n, errored: 100 - n, canceled: 0, expired: 0 });
    expect(results.slice(0, n).map((r: { custom_id: string; result: { type: string } }) => [r.custom_id, r.result.type])).toEqual(
      Array.from({ length: n }, (_, i) => [`req-${i}`, 'succeeded']),
    );
    expect(results[n]).toEqual({
      custom_id: `req-${n}`,
      result: {
        type: 'errored',
        error: { type: 'error', error: { type: 'billing_error', message: expect.stringMatching(/^This request requires more credits/) } },
      },
    });
    for (const [i, r] of results.slice(n + 1).entries())
      expect(r).toEqual({
        custom_id: `req-${n + 1 + i}`,
        result: {
          type: 'errored',
          error: {
            type: 'error',
            error: {
              type: 'billing_error',
              message: `The balance ran out during this batch: request 'req-${n}' was refused for it, and this request was not run. Top up, then submit the requests not run in a new batch.`,
            },
          },
        },
      });
    // each succeeded request debited once, its usage at sim/echo's prices; balance = ledger, never below zero
    await stack.waitNoHolds(t.tenantId, 20_000);
    let cost = 0n;
    for (const r of results.slice(0, n)) cost += costMicros(r.result.message.usage.input_tokens, r.result.message.usage.output_tokens, SIM_PRICES.echo);
    const deadlineDebits = Date.now() + 20_000;
    let debits: { n: number; sum: string };
    for (;;) {
      debits = (
        await stack.db.query("select count(*)::int as n, coalesce(sum(amount_micros), 0)::text as sum from ledger where tenant_id = $1 and kind = 'debit'", [
          t.tenantId,
        ])
      ).rows[0];
      if (debits.n >= n || Date.now() > deadlineDebits) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(debits).toEqual({ n, sum: String(cost) });
    expect(await balanceOf(t.tenantId)).toBe(1_000n - cost);
    expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
  }, 90_000);

  it('a key limit refusing a line fails that line only: the batch is not out of balance', async () => {
    // a key limit of R$ 0,0006 and a balance of R$ 10: the key's limit refuses, the balance never does
    // (60 lines cost ~1 000 µBRL: the limit is crossed about halfway, never at the very end)
    const t = await stack.tenant('10', { limitMicros: 600n });
    const client = clientOf(t.key);
    const { batch } = await runBatch(
      client,
      Array.from({ length: 60 }, (_, i) => chatLine(i)),
    );
    const ended = await waitEnded(client, batch.id, 30_000);
    const output = await contentLines(client, ended.output_file_id);
    const failed = await contentLines(client, ended.error_file_id);
    expect(output.length).toBeGreaterThan(0);
    expect(failed.length).toBeGreaterThan(0);
    expect(ended.request_counts).toEqual({ total: 60, completed: output.length, failed: failed.length });
    for (const l of failed) {
      expect(l.response?.status_code).toBe(402);
      expect(l.response?.request_id).toMatch(/^gen-/);
      expect(l.response?.body).toMatchObject({ error: { type: 'insufficient_quota', code: 'key_limit_exceeded' } });
    }
    const { rows } = await stack.db.query('select out_of_balance_line from batches where id = $1', [batch.id]);
    expect(rows).toEqual([{ out_of_balance_line: null }]);
    await expectBilledExactly(t.tenantId, 10_000_000n, output);
  }, 90_000);

  it('BATCH_MAX_IN_FLIGHT: a third unfinished batch is a 429, OpenAI and Anthropic alike; another tenant is not counted', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const slow = { sim: { first_token_ms: 250 } };
    const lines = Array.from({ length: 20 }, (_, i) => chatLine(i, slow));
    const first = await runBatch(client, lines);
    const second = await runBatch(client, lines);
    const third = await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' });
    const capped = {
      message:
        'You have 2 batches in progress, the most a tenant may have at once (BATCH_MAX_IN_FLIGHT = 2). Wait for one to end, or cancel one, then try again.',
      type: 'rate_limit_error',
      code: 'batch_limit_exceeded',
      param: null,
    };
    expect(await refusal(client.batches.create({ input_file_id: third.id, endpoint: '/v1/chat/completions', completion_window: '24h' }))).toEqual({
      status: 429,
      error: capped,
    });
    const origin = stack.baseUrl.replace(/\/v1$/, '');
    const anthropic = await fetch(`${origin}/v1/messages/batches`, {
      method: 'POST',
      headers: { 'x-api-key': t.key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify({ requests: [{ custom_id: 'a', params: { model: 'sim/echo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] } }] }),
    });
    expect(anthropic.status).toBe(429);
    expect(await anthropic.json()).toEqual({ error: capped });
    // nothing was stored for the refused ones
    const { rows } = await stack.db.query('select count(*)::int as n from batches where tenant_id = $1', [t.tenantId]);
    expect(rows[0].n).toBe(2);
    // another tenant's batches count apart
    const other = await stack.tenant('1');
    const otherBatch = await runBatch(clientOf(other.key), [chatLine(0)]);
    expect(otherBatch.batch.status).toBe('in_progress');
    // one ended (cancelled): room for one more
    await client.batches.cancel(first.batch.id);
    expect((await waitEnded(client, first.batch.id, 30_000)).status).toBe('cancelled');
    const again = await client.batches.create({ input_file_id: third.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(again.status).toBe('in_progress');
    for (const id of [second.batch.id, again.id]) await client.batches.cancel(id);
    for (const id of [second.batch.id, again.id]) expect((await waitEnded(client, id, 30_000)).status).toBe('cancelled');
    await waitEnded(clientOf(other.key), otherBatch.batch.id, 30_000);
  }, 120_000);

  it('BATCH_MAX_LINES_IN_FLIGHT: a batch whose lines would pass the lines not ended of unfinished batches allowed is a 429', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    // one line at a time, 10 s each: none of the 250 ends while the next batches are asked for (the cap counts the lines not ended)
    const slow = { sim: { first_token_ms: 10_000 } };
    const big = await runBatch(
      client,
      Array.from({ length: 250 }, (_, i) => chatLine(i, slow)),
    );
    const file = await client.files.create({
      file: await toFile(Buffer.from(`${Array.from({ length: 51 }, (_, i) => chatLine(i)).join('\n')}\n`), 'in.jsonl'),
      purpose: 'batch',
    });
    expect(await refusal(client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }))).toEqual({
      status: 429,
      error: {
        message:
          "Your batches in progress hold 250 requests not ended yet; this batch's 51 would pass the most a tenant may have in progress at once (BATCH_MAX_LINES_IN_FLIGHT = 300). Wait for a batch to end, or cancel one, then try again.",
        type: 'rate_limit_error',
        code: 'batch_limit_exceeded',
        param: null,
      },
    });
    // 50 more make 300: taken
    const fifty = await client.files.create({
      file: await toFile(Buffer.from(`${Array.from({ length: 50 }, (_, i) => chatLine(i)).join('\n')}\n`), 'in.jsonl'),
      purpose: 'batch',
    });
    const taken = await client.batches.create({ input_file_id: fifty.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(taken.request_counts).toEqual({ total: 50, completed: 0, failed: 0 });
    for (const id of [big.batch.id, taken.id]) await client.batches.cancel(id);
    for (const id of [big.batch.id, taken.id]) expect((await waitEnded(client, id, 30_000)).status).toBe('cancelled');
  }, 120_000);
});

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (err) {
    const e = err as InstanceType<typeof OpenAI.APIError>;
    return { status: e.status, error: e.error };
  }
  throw new Error('not refused');
}
