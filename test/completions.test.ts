import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mockText } from '../bench/mock-upstream/content.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { parseBrl, usageCostMicros } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';
import { estimateTokens } from '../src/providers/shared/estimate.ts';
import { countTokens, promptTokens } from '../src/providers/sim/tokens.ts';
import { SIM_PRICES, startStackWithVendor, type TestStack } from './helpers/stack.ts';

// POST /v1/completions (legacy text completions) through the whole path with the openai SDK: a
// vendor with native legacy completions (forwarded to its /completions), one without (translated
// into a chat completion with one user message), and the sim.

const UPSTREAM_KEY = 'sk-upstream-legacy-1f2e3d4c5b6a79880716253443526170';
const PRICES = { input: 3_000_000n, output: 12_000_000n };

let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'sim,openai' }));
  const vendor = { pool: 'openai', base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', input_price: PRICES.input, output_price: PRICES.output };
  await upsertModel(stack.db, {
    ...vendor,
    id: 'mocklegacy/instruct',
    upstream_model: 'gpt-3.5-turbo-instruct',
    legacy_completions: true,
    extra_params: ['mock'],
    max_output_tokens: 1000,
  });
  await upsertModel(stack.db, { ...vendor, id: 'mockchat/plain', upstream_model: 'gpt-4o-mini', max_output_tokens: 1000 });
}, 60000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const ledgerRow = async (requestId: string) => (await stack.db.query('select * from ledger where request_id = $1', [requestId])).rows[0];
const balance = async (tenantId: string) =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros as bigint;
const ledgerCount = async (tenantId: string) =>
  (await stack.db.query(`select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'`, [tenantId])).rows[0].n as number;
const holdCount = async (tenantId: string) =>
  (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n as number;
const post = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${stack.baseUrl}/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** The one debit of a completed request: exactly the vendor's usage at the model's prices, from a R$ 1,00 balance. */
async function expectDebit(requestId: string, tenantId: string, usage: { prompt_tokens: number; completion_tokens: number }, prices: typeof PRICES) {
  await stack.waitSettled([requestId]);
  const expected = usageCostMicros(usage, prices);
  const row = await ledgerRow(requestId);
  expect(row).toMatchObject({ input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens, estimated: false, route: 'completions' });
  expect(row.amount_micros).toBe(expected);
  expect(await balance(tenantId)).toBe(parseBrl('1.00') - expected);
  await stack.waitNoHolds(tenantId);
}

async function collect(stream: AsyncIterable<OpenAI.Completions.Completion>) {
  const out = { text: '', finish: '' as string | null, usage: undefined as OpenAI.CompletionUsage | undefined, chunks: 0 };
  for await (const chunk of stream) {
    out.chunks++;
    out.text += chunk.choices[0]?.text ?? '';
    if (chunk.choices[0]?.finish_reason) out.finish = chunk.choices[0].finish_reason;
    if (chunk.usage) out.usage = chunk.usage;
    expect(chunk.object).toBe('text_completion');
  }
  return out;
}

describe('POST /v1/completions with the openai SDK', () => {
  it('a vendor with native legacy completions, not streamed: its /v1/completions gets exactly the allowlisted fields', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const prompt = 'Say this is a test';
    const { data, response } = await client.completions
      .create({ model: 'mocklegacy/instruct', prompt, max_tokens: 7, temperature: 0, stop: ['\n'], user: 'u-1', seed: 3, suffix: ' end', n: 1, best_of: 1 })
      .withResponse();
    expect(mock.stats.lastPath).toBe('/v1/completions');
    expect(mock.stats.lastAuthorization).toBe(`Bearer ${UPSTREAM_KEY}`);
    expect(mock.stats.lastBody).toEqual({
      model: 'gpt-3.5-turbo-instruct',
      prompt,
      suffix: ' end',
      max_tokens: 7,
      temperature: 0,
      stop: ['\n'],
      user: 'u-1',
      seed: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const requestId = response.headers.get('x-request-id')!;
    expect(data).toMatchObject({ id: requestId, object: 'text_completion', model: 'mocklegacy/instruct' });
    expect(data.choices).toEqual([{ text: mockText(7), index: 0, logprobs: null, finish_reason: 'length' }]);
    const usage = { prompt_tokens: countTokens(prompt) + countTokens(' end'), completion_tokens: 7 };
    expect(data.usage).toMatchObject({ ...usage, total_tokens: usage.prompt_tokens + 7 });
    await expectDebit(requestId, t.tenantId, usage, PRICES);
  });

  it('a vendor with native legacy completions, streamed with usage; a stop sequence ends it', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const { data, response } = await client.completions
      .create({ model: 'mocklegacy/instruct', prompt: [[101, 102, 103]], stream: true, stream_options: { include_usage: true }, stop: ' foo' })
      .withResponse();
    const out = await collect(data);
    expect(mock.stats.lastBody).toMatchObject({ prompt: [[101, 102, 103]], stop: ' foo', max_tokens: 16 });
    expect(out.text).toBe('Hello world');
    expect(out.finish).toBe('stop');
    // the token that completed the stop sequence was generated: the vendor bills it
    const usage = { prompt_tokens: 3, completion_tokens: 3 };
    expect(out.usage).toMatchObject(usage);
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, usage, PRICES);
  });

  it('a vendor without legacy completions: translated into a chat completion with one user message', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const prompt = 'Once upon a time';
    const { data, response } = await client.completions.create({ model: 'mockchat/plain', prompt: [prompt], max_tokens: 5, temperature: 0.2 }).withResponse();
    expect(mock.stats.lastPath).toBe('/v1/chat/completions');
    expect(mock.stats.lastBody).toEqual({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: prompt }],
      temperature: 0.2,
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(data.choices).toEqual([{ text: mockText(5), index: 0, logprobs: null, finish_reason: 'length' }]);
    const usage = { prompt_tokens: promptTokens([{ role: 'user', content: prompt }]), completion_tokens: 5 };
    expect(data.usage).toMatchObject(usage);
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, usage, PRICES);
  });

  it('a vendor without legacy completions, streamed', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const { data, response } = await client.completions
      .create({ model: 'mockchat/plain', prompt: 'go', stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const out = await collect(data);
    expect(out).toMatchObject({ text: mockText(16), finish: 'stop' });
    const usage = { prompt_tokens: promptTokens([{ role: 'user', content: 'go' }]), completion_tokens: 16 };
    expect(out.usage).toMatchObject(usage);
    await expectDebit(response.headers.get('x-request-id')!, t.tenantId, usage, PRICES);
  });

  it('sim/echo, streamed and not: the prompt echoed, billed by the sim count', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const prompt = 'Echo me, catraca!';
    const usage = { prompt_tokens: promptTokens([{ role: 'user', content: prompt }]), completion_tokens: countTokens(prompt) };
    const whole = await client.completions.create({ model: 'sim/echo', prompt, max_tokens: 50 }).withResponse();
    expect(whole.data.choices[0]).toEqual({ text: prompt, index: 0, logprobs: null, finish_reason: 'stop' });
    await expectDebit(whole.response.headers.get('x-request-id')!, t.tenantId, usage, SIM_PRICES.echo);
    const streamed = await client.completions.create({ model: 'sim/echo', prompt, max_tokens: 2, stream: true }).withResponse();
    const out = await collect(streamed.data);
    expect(out).toMatchObject({ text: 'Echo me,', finish: 'length', usage: undefined });
    const id = streamed.response.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    expect((await ledgerRow(id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: usage.prompt_tokens, completion_tokens: 2 }, SIM_PRICES.echo));
  });
});

describe('POST /v1/completions refusals', () => {
  it("suffix without native legacy completions, echo, logprobs, n=2, batch prompts, max_tokens over the model's: 400 naming them, nothing held", async () => {
    const t = await stack.tenant('1.00');
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ model: 'mockchat/plain', suffix: '!' }, 'suffix', 'suffix is only available on models with native legacy completions'],
      [{ model: 'sim/echo', prompt: [1, 2] }, 'prompt', 'Token-id prompts are only available on models with native legacy completions'],
      [{ model: 'mocklegacy/instruct', echo: true }, 'echo', 'echo is not supported: the vendor would bill the prompt again as output.'],
      [{ model: 'mocklegacy/instruct', logprobs: 2 }, 'logprobs', 'logprobs are not relayed by this gateway.'],
      [{ model: 'mocklegacy/instruct', n: 2 }, 'n', 'Only n=1 is supported'],
      [{ model: 'mocklegacy/instruct', best_of: 2 }, 'best_of', 'Only best_of=1 is supported'],
      [{ model: 'mocklegacy/instruct', prompt: ['a', 'b'] }, 'prompt', 'batch prompts are not relayed'],
      [{ model: 'mocklegacy/instruct', max_tokens: 1001 }, 'max_tokens', 'max_tokens is too large: 1001. This model supports at most 1000 completion tokens.'],
      [{ model: 'mocklegacy/instruct', logit_bias: { 1: 1 } }, 'logit_bias', 'Unrecognized request argument supplied: logit_bias'],
      [{ model: 'sim/echo', sim: 1, frobnicate: true }, 'frobnicate', 'Unrecognized request argument supplied: frobnicate'],
    ];
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    for (const [body, param, message] of cases) {
      const res = await post(t.key, { prompt: 'x', ...body });
      expect([res.status, (await res.json()).error]).toEqual([
        400,
        { type: 'invalid_request_error', code: expect.any(String), param, message: expect.stringContaining(message) },
      ]);
    }
    await expect(client.completions.create({ model: 'mocklegacy/instruct', prompt: 'x', n: 2 })).rejects.toMatchObject({ status: 400, param: 'n' });
    expect([await holdCount(t.tenantId), await ledgerCount(t.tenantId), await balance(t.tenantId)]).toEqual([0, 0, parseBrl('1.00')]);
  });

  it('a client disconnect mid-stream (translated, sim): the cancel rule bills the prompt and what was generated', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const res = await post(t.key, { model: 'sim/lorem', prompt: 'go on', stream: true, max_tokens: 400, sim: { tokens_per_second: 50 } }, controller.signal);
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"text":"[^"]/g) ?? []).length < 5) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row).toMatchObject({ outcome: 'cancelled', estimated: false, input_tokens: promptTokens([{ role: 'user', content: 'go on' }]) });
    expect(row.output_tokens).toBeGreaterThanOrEqual(5);
    expect(row.output_tokens).toBeLessThan(15);
    expect(row.amount_micros).toBe(usageCostMicros({ prompt_tokens: row.input_tokens, completion_tokens: row.output_tokens }, SIM_PRICES.lorem));
    expect(await balance(t.tenantId)).toBe(parseBrl('1.00') - row.amount_micros);
    await stack.waitNoHolds(t.tenantId);
  });

  it('a client disconnect mid-stream (native): the worker estimates the prompt and the output it received', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const prompt = 'Write a long story about a turnstile';
    const res = await post(
      t.key,
      { model: 'mocklegacy/instruct', prompt, stream: true, max_tokens: 400, mock: { output_tokens: 400, tokens_per_second: 50 } },
      controller.signal,
    );
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"text":"[^"]/g) ?? []).length < 5) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await stack.waitSettled([requestId]);
    const row = await ledgerRow(requestId);
    expect(row).toMatchObject({ outcome: 'cancelled', estimated: true, input_tokens: await estimateTokens(prompt) });
    expect(row.output_tokens).toBeGreaterThanOrEqual(5);
    expect(row.output_tokens).toBeLessThan(40);
    expect(row.amount_micros).toBe(usageCostMicros({ prompt_tokens: row.input_tokens, completion_tokens: row.output_tokens }, PRICES));
    await stack.waitNoHolds(t.tenantId);
  });

  it("wrong key 401, a model outside the key's allowlist 403, an empty balance 402: in OpenAI's shape", async () => {
    const bad = new OpenAI({ baseURL: stack.baseUrl, apiKey: 'sk-cat-v1-nope', maxRetries: 0 });
    await expect(bad.completions.create({ model: 'sim/echo', prompt: 'x' })).rejects.toMatchObject({
      status: 401,
      code: 'invalid_api_key',
      type: 'authentication_error',
    });
    const limited = await stack.tenant('1.00', { models: ['sim/lorem'] });
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: limited.key, maxRetries: 0 });
    await expect(client.completions.create({ model: 'sim/echo', prompt: 'x' })).rejects.toMatchObject({
      status: 403,
      code: 'model_not_allowed',
      type: 'permission_error',
      param: 'model',
    });
    const broke = await stack.tenant('0');
    const poor = new OpenAI({ baseURL: stack.baseUrl, apiKey: broke.key, maxRetries: 0 });
    await expect(poor.completions.create({ model: 'mocklegacy/instruct', prompt: 'x', max_tokens: 10 })).rejects.toMatchObject({
      status: 402,
      code: 'insufficient_balance',
      type: 'insufficient_quota',
    });
    expect(await ledgerCount(broke.tenantId)).toBe(0);
  });
});
