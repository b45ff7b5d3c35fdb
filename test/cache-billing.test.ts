import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MOCK_REASONING } from '../bench/mock-upstream/content.ts';
import type { MockUpstream } from '../bench/mock-upstream/server.ts';
import { upsertModel } from '../src/db/models.ts';
import { estimateTokens } from '../src/providers/shared/estimate.ts';
import { startStackWithVendor, type TestStack } from './helpers/stack.ts';

// Cache writes by lifetime and reasoning tokens of an Anthropic-protocol vendor, billed to the
// micro-real through the whole stack (front door, worker, metering), streamed and not, on
// /v1/messages and on /v1/chat/completions. The mock vendor speaks Anthropic's wire format: the
// cache_creation split (5 minutes / 1 hour) comes only in message_start, message_delta carries the
// cumulative counts without it (MessageDeltaUsage), and thinking is billed inside output_tokens.
// OpenAI's cached_tokens, streamed and not, are covered in test/openrouter.test.ts.

const UPSTREAM_KEY = 'sk-upstream-cachebill-0123456789abcdef';
// micro-BRL per 1M tokens: R$ 3 in, R$ 15 out, reads R$ 0,30, 5-minute writes R$ 3,75 (1.25×), 1-hour writes R$ 6 (2×)
const IN = 3_000_000n;
const OUT = 15_000_000n;
const READ = 300_000n;
const WRITE_5M = 3_750_000n;
const WRITE_1H = 6_000_000n;

let stack: TestStack;
let mock: MockUpstream;
let origin: string;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'sim,openai,anthropic' }));
  origin = stack.baseUrl.replace(/\/v1$/, '');
  const claude = {
    pool: 'anthropic',
    protocol: 'anthropic' as const,
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: IN,
    output_price: OUT,
    cached_input_price: READ,
    cache_write_price: WRITE_5M,
    cache_write_1h_price: WRITE_1H,
    max_output_tokens: 8192,
  };
  await upsertModel(stack.db, { id: 'cachebill/claude', upstream_model: 'mock-claude', ...claude });
  await upsertModel(stack.db, { id: 'cachebill/thinking', upstream_model: 'mock-claude-thinking', reasoning: true, ...claude });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

/** The mock's own record of what it billed the last Messages request. */
function vendorUsage() {
  const entry = mock.stats.usages.filter((u) => u.api === 'messages').at(-1);
  if (entry?.api !== 'messages') throw new Error('the mock billed no Messages request');
  return entry.usage;
}

/** ceil(Σ tokens × price / 1M), by hand: the billing rule of docs/billing.md. */
function expectedMicros(u: { input: number; read?: number; write5m?: number; write1h?: number; output: number }): bigint {
  const pico =
    BigInt(u.input) * IN + BigInt(u.read ?? 0) * READ + BigInt(u.write5m ?? 0) * WRITE_5M + BigInt(u.write1h ?? 0) * WRITE_1H + BigInt(u.output) * OUT;
  return (pico + 999_999n) / 1_000_000n;
}

async function ledgerRow(requestId: string) {
  await stack.waitSettled([requestId]);
  const { rows } = await stack.db.query("select * from ledger where request_id = $1 and kind = 'debit'", [requestId]);
  expect(rows).toHaveLength(1);
  return rows[0];
}

/** The data of each SSE event of a body. */
const events = (text: string) =>
  text
    .split('\n\n')
    .map((e) =>
      e
        .split('\n')
        .find((l) => l.startsWith('data: '))
        ?.slice(6),
    )
    .filter((d): d is string => d !== undefined && d !== '[DONE]')
    .map((d) => JSON.parse(d));

const messages = (key: string, body: Record<string, unknown>) =>
  fetch(`${origin}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
const chat = (key: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** A system prompt no earlier request cached: every marked token is a write. */
const freshSystem = (ttl?: '1h') => {
  const nonce = Math.random().toString(36).slice(2);
  return [
    { type: 'text', text: `Handbook ${nonce}. ${'Always be exact. '.repeat(30)}`, cache_control: ttl ? { type: 'ephemeral', ttl } : { type: 'ephemeral' } },
  ];
};

describe('one-hour cache writes are billed at the one-hour price (the split comes from message_start)', () => {
  it.each([false, true])('/v1/messages (streamed: %s)', async (stream) => {
    const t = await stack.tenant('1.00');
    const res = await messages(t.key, {
      model: 'cachebill/claude',
      max_tokens: 5,
      stream,
      system: freshSystem('1h'),
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id')!;
    const v = vendorUsage();
    expect(v.cache_creation).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: v.cache_creation_input_tokens });
    expect(v.cache_creation_input_tokens).toBeGreaterThan(30);
    let usage: Record<string, unknown>;
    if (stream) {
      const evs = events(await res.text());
      usage = evs.find((e) => e.type === 'message_delta').usage;
    } else usage = (await res.json()).usage;
    expect(usage).toMatchObject({
      input_tokens: v.input_tokens,
      cache_creation_input_tokens: v.cache_creation_input_tokens,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: v.cache_creation_input_tokens },
      output_tokens: v.output_tokens,
    });
    const row = await ledgerRow(id);
    const exact = expectedMicros({ input: v.input_tokens, write1h: v.cache_creation_input_tokens, output: v.output_tokens });
    expect(row).toMatchObject({
      amount_micros: exact,
      input_tokens: v.input_tokens + v.cache_creation_input_tokens,
      cache_write_tokens: null,
      cache_write_1h_tokens: v.cache_creation_input_tokens,
      output_tokens: v.output_tokens,
    });
    // what the bug billed: every write at the 5-minute price
    expect(exact).toBeGreaterThan(expectedMicros({ input: v.input_tokens, write5m: v.cache_creation_input_tokens, output: v.output_tokens }));
  });

  it.each([false, true])('/v1/chat/completions to an Anthropic-protocol model (streamed: %s)', async (stream) => {
    const t = await stack.tenant('1.00');
    const body = {
      model: 'cachebill/claude',
      max_tokens: 5,
      messages: [
        { role: 'system', content: freshSystem('1h') },
        { role: 'user', content: 'hi' },
      ],
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    };
    const res = await chat(t.key, body);
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id')!;
    const usage = stream ? events(await res.text()).find((e) => e.usage)!.usage : (await res.json()).usage;
    const v = vendorUsage();
    expect(v.cache_creation.ephemeral_1h_input_tokens).toBe(v.cache_creation_input_tokens);
    const prompt = v.input_tokens + v.cache_creation_input_tokens;
    expect(usage).toMatchObject({
      prompt_tokens: prompt,
      completion_tokens: v.output_tokens,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: v.cache_creation_input_tokens },
    });
    const exact = expectedMicros({ input: v.input_tokens, write1h: v.cache_creation_input_tokens, output: v.output_tokens });
    expect(await ledgerRow(id)).toMatchObject({
      amount_micros: exact,
      cache_write_tokens: null,
      cache_write_1h_tokens: v.cache_creation_input_tokens,
      route: 'chat',
    });
  });

  it('5-minute and 1-hour writes in one streamed request keep their own prices; a read of them is billed at the read price', async () => {
    const t = await stack.tenant('1.00');
    const nonce = Math.random().toString(36).slice(2);
    const system = [
      { type: 'text', text: `Rules ${nonce}. ${'Always be exact. '.repeat(30)}`, cache_control: { type: 'ephemeral', ttl: '1h' } },
      { type: 'text', text: `More rules. ${'Never guess. '.repeat(20)}`, cache_control: { type: 'ephemeral' } },
    ];
    const ask = async (q: string) => {
      const res = await messages(t.key, { model: 'cachebill/claude', max_tokens: 5, stream: true, system, messages: [{ role: 'user', content: q }] });
      expect(res.status).toBe(200);
      const id = res.headers.get('x-request-id')!;
      const usage = events(await res.text()).find((e) => e.type === 'message_delta').usage;
      return { id, usage, v: vendorUsage() };
    };
    const first = await ask('one');
    const w5m = first.v.cache_creation.ephemeral_5m_input_tokens;
    const w1h = first.v.cache_creation.ephemeral_1h_input_tokens;
    expect(w5m).toBeGreaterThan(0);
    expect(w1h).toBeGreaterThan(0);
    expect(first.usage.cache_creation).toEqual({ ephemeral_5m_input_tokens: w5m, ephemeral_1h_input_tokens: w1h });
    expect(await ledgerRow(first.id)).toMatchObject({
      amount_micros: expectedMicros({ input: first.v.input_tokens, write5m: w5m, write1h: w1h, output: first.v.output_tokens }),
      cache_write_tokens: w5m,
      cache_write_1h_tokens: w1h,
    });
    const second = await ask('two');
    expect(second.v.cache_read_input_tokens).toBe(w5m + w1h);
    expect(await ledgerRow(second.id)).toMatchObject({
      amount_micros: expectedMicros({ input: second.v.input_tokens, read: w5m + w1h, output: second.v.output_tokens }),
      cached_tokens: w5m + w1h,
      cache_write_tokens: null,
      cache_write_1h_tokens: null,
    });
  });
});

describe('Anthropic reasoning tokens: the thinking text received, counted; billed as output', () => {
  it.each([false, true])('chat completions with `reasoning` to an Anthropic reasoning model (streamed: %s)', async (stream) => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'cachebill/thinking',
      max_tokens: 2000,
      reasoning: { max_tokens: 1200 },
      messages: [{ role: 'user', content: 'think first' }],
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    });
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id')!;
    const usage = stream ? events(await res.text()).find((e) => e.usage)!.usage : (await res.json()).usage;
    const v = vendorUsage();
    const thinking = await estimateTokens(MOCK_REASONING.join(''));
    expect(thinking).toBeGreaterThan(0);
    expect(usage).toMatchObject({
      prompt_tokens: v.input_tokens,
      completion_tokens: v.output_tokens,
      completion_tokens_details: { reasoning_tokens: thinking },
    });
    expect(usage.completion_tokens_details.reasoning_tokens).toBeLessThanOrEqual(usage.completion_tokens);
    // all output, reasoning included, at the output price: nothing more, nothing less
    expect(await ledgerRow(id)).toMatchObject({
      amount_micros: expectedMicros({ input: v.input_tokens, output: v.output_tokens }),
      output_tokens: v.output_tokens,
      reasoning_tokens: thinking,
    });
  });

  it('/v1/messages with thinking: the ledger keeps the reasoning tokens, the debit is unchanged', async () => {
    const t = await stack.tenant('1.00');
    const res = await messages(t.key, {
      model: 'cachebill/thinking',
      max_tokens: 2000,
      thinking: { type: 'enabled', budget_tokens: 1024 },
      messages: [{ role: 'user', content: 'think first' }],
    });
    expect(res.status).toBe(200);
    const v = vendorUsage();
    expect(await ledgerRow(res.headers.get('x-request-id')!)).toMatchObject({
      amount_micros: expectedMicros({ input: v.input_tokens, output: v.output_tokens }),
      reasoning_tokens: await estimateTokens(MOCK_REASONING.join('')),
    });
  });
});
