import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MOCK_CLAUDE_IMAGE_TOKENS, mockClaudePromptTokens } from '../bench/mock-upstream/anthropic.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS, mockText } from '../bench/mock-upstream/content.ts';
import { type MockUpstream, mockPromptTokens } from '../bench/mock-upstream/server.ts';
import { type Prices, usageCostMicros } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';
import { toChat } from '../src/protocols/messages/to-chat.ts';
import { estimateCallPromptTokens } from '../src/providers/shared/estimate.ts';
import type { UpstreamCall } from '../src/providers/types.ts';
import { countTokens, promptTokens } from '../src/providers/sim/tokens.ts';
import { SIM_PRICES, startStackWithVendor, type TestStack } from './helpers/stack.ts';

// /v1/messages and /v1/messages/count_tokens through the whole stack, with Anthropic's own SDK
// and the Vercel AI SDK's Anthropic provider as clients: to an Anthropic-protocol mock vendor
// (passed through natively), to an OpenAI-compatible one and to the sim (translated to chat and
// back). Every debit is checked to the micro-real against the vendor's own usage.

const UPSTREAM_KEY = 'sk-upstream-0a1b2c3d4e5f60718293a4b5c6d7e8f9';
const PRICES: Prices = { input: 3_000_000n, output: 15_000_000n }; // R$ 3 / R$ 15 per 1M tokens
const CACHE_PRICES: Prices = { ...PRICES, cachedInput: 300_000n, cacheWrite: 3_750_000n, cacheWrite1h: 6_000_000n };
const CLAUDE_MAX_OUTPUT = 8192;
const MAX_BODY = 256 * 1024;

let stack: TestStack;
let mock: MockUpstream;
let origin: string;

beforeAll(async () => {
  ({ stack, mock } = await startStackWithVendor(UPSTREAM_KEY, { pools: 'sim,openai,anthropic', env: { MAX_BODY_BYTES: String(MAX_BODY) } }));
  origin = stack.baseUrl.replace(/\/v1$/, '');
  const claude = { pool: 'anthropic', base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', max_output_tokens: CLAUDE_MAX_OUTPUT };
  for (const [id, upstream] of Object.entries({ ok: 'mock-claude', thinking: 'mock-claude-thinking', agent: 'mock-claude-agent', slow: 'mock-claude-slow' })) {
    await upsertModel(stack.db, { id: `msgclaude/${id}`, upstream_model: upstream, input_price: PRICES.input, output_price: PRICES.output, ...claude });
  }
  await upsertModel(stack.db, { id: 'msgclaude/overloaded', upstream_model: 'mock-claude-overloaded', input_price: 1n, output_price: 1n, ...claude });
  await upsertModel(stack.db, {
    id: 'msgclaude/cache',
    upstream_model: 'mock-claude',
    input_price: CACHE_PRICES.input,
    output_price: CACHE_PRICES.output,
    cached_input_price: CACHE_PRICES.cachedInput,
    cache_write_price: CACHE_PRICES.cacheWrite,
    cache_write_1h_price: CACHE_PRICES.cacheWrite1h,
    input_modalities: ['text', 'image'],
    image_input_tokens: MOCK_CLAUDE_IMAGE_TOKENS,
    ...claude,
  });
  const openai = { pool: 'openai', base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', input_price: PRICES.input, output_price: PRICES.output };
  await upsertModel(stack.db, { id: 'msgvendor/ok', upstream_model: 'gpt-4o-mini', ...openai });
  await upsertModel(stack.db, { id: 'msgvendor/agent', upstream_model: 'mock-agent', ...openai });
  await upsertModel(stack.db, { id: 'msgvendor/reasoning', upstream_model: 'mock-reasoning', reasoning: true, ...openai });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

// a timeout of our own: the SDK refuses a non-streamed request with a large max_tokens under its default
const client = (key: string, opts: Partial<ConstructorParameters<typeof Anthropic>[0]> = {}) =>
  new Anthropic({ baseURL: origin, apiKey: key, maxRetries: 0, timeout: 60_000, ...opts });

async function ledgerRow(requestId: string) {
  await stack.waitSettled([requestId]);
  return (await stack.db.query('select * from ledger where request_id = $1', [requestId])).rows[0];
}
const balanceOf = async (tenantId: string): Promise<bigint> =>
  (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros;
const holdsOf = async (tenantId: string): Promise<number> =>
  (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n;

/** A raw POST (statuses, headers and bytes exactly as a client sees them). */
function post(path: string, body: unknown, headers: Record<string, string>, signal?: AbortSignal) {
  return fetch(`${origin}${path}`, {
    method: 'POST',
    signal,
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
    body: JSON.stringify(body),
  });
}

/** The mock's last Messages usage as our billed counts. */
function lastClaudeUsage() {
  const entry = mock.stats.usages.filter((u) => u.api === 'messages').at(-1)!;
  if (entry.api !== 'messages') throw new Error('no messages usage');
  const u = entry.usage;
  return {
    anthropic: u,
    billed: {
      prompt_tokens: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
      completion_tokens: u.output_tokens,
      cached_tokens: u.cache_read_input_tokens,
      cache_write_tokens: u.cache_creation.ephemeral_5m_input_tokens,
      cache_write_1h_tokens: u.cache_creation.ephemeral_1h_input_tokens,
    },
  };
}

describe('the Anthropic SDK, to an Anthropic-protocol vendor (passed through)', () => {
  it('messages.create: the whole Message, the vendor billed exactly, request-id header, max_tokens clamped to the model', async () => {
    const t = await stack.tenant('1.00');
    const { data: msg, response } = await client(t.key)
      .messages.create({
        model: 'msgclaude/ok',
        max_tokens: 32000,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'hello there' }],
        metadata: { user_id: 'end-user-7' },
      })
      .withResponse();
    const requestId = response.headers.get('request-id')!;
    expect(response.headers.get('x-request-id')).toBe(requestId);
    expect(msg).toMatchObject({ id: requestId, type: 'message', role: 'assistant', model: 'msgclaude/ok', stop_reason: 'end_turn', stop_sequence: null });
    expect(msg.content).toEqual([{ type: 'text', text: mockText(16) }]);
    // Claude Code's 32 000 is above the model's maximum: lowered to it, the vendor got the model's maximum
    expect(mock.stats.lastBody).toMatchObject({ model: 'mock-claude', max_tokens: CLAUDE_MAX_OUTPUT, stream: true, metadata: { user_id: 'end-user-7' } });
    const input = promptTokens([{ content: 'hello there' }]) + countTokens('Be brief.');
    expect(msg.usage).toMatchObject({ input_tokens: input, output_tokens: 16, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
    const row = await ledgerRow(requestId);
    const cost = usageCostMicros({ prompt_tokens: input, completion_tokens: 16 }, PRICES);
    expect(row).toMatchObject({ amount_micros: cost, input_tokens: input, output_tokens: 16, route: 'messages', end_user: 'end-user-7', outcome: 'completed' });
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - cost);
  });

  it('messages.stream: Anthropic events, the final message, usage in message_delta, billed exactly', async () => {
    const t = await stack.tenant('1.00');
    const stream = client(t.key).messages.stream({ model: 'msgclaude/ok', max_tokens: 7, messages: [{ role: 'user', content: 'stream please' }] });
    const types: string[] = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const msg = await stream.finalMessage();
    expect(msg.content).toEqual([{ type: 'text', text: mockText(7) }]);
    expect(msg.stop_reason).toBe('max_tokens');
    expect(types[0]).toBe('message_start');
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    const input = promptTokens([{ content: 'stream please' }]);
    expect(msg.usage).toMatchObject({ input_tokens: input, output_tokens: 7 });
    const row = await ledgerRow(msg.id);
    expect(row.amount_micros).toBe(usageCostMicros({ prompt_tokens: input, completion_tokens: 7 }, PRICES));
  });

  it('stop_sequences: the vendor stops before the sequence and says which one', async () => {
    const t = await stack.tenant('1.00');
    const msg = await client(t.key).messages.create({
      model: 'msgclaude/ok',
      max_tokens: 50,
      stop_sequences: [' baz'],
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(msg).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: ' baz', content: [{ type: 'text', text: mockText(4) }] });
    expect(mock.stats.lastBody).toMatchObject({ stop_sequences: [' baz'] });
  });

  it('a tool-use round trip: tool_use with its input as an object, the tool_result back, the answer; each call billed', async () => {
    const t = await stack.tenant('1.00');
    const tools: Anthropic.Tool[] = [
      { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
    ];
    const c = client(t.key);
    const first = await c.messages.create({ model: 'msgclaude/agent', max_tokens: 100, tools, messages: [{ role: 'user', content: 'weather in SP?' }] });
    expect(first.stop_reason).toBe('tool_use');
    const use = first.content[0] as Anthropic.ToolUseBlock;
    expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', input: JSON.parse(MOCK_TOOL_CALL.arguments) });
    const stream = c.messages.stream({
      model: 'msgclaude/agent',
      max_tokens: 100,
      tools,
      messages: [
        { role: 'user', content: 'weather in SP?' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '25 C' }] },
      ],
    });
    const second = await stream.finalMessage();
    expect(second.content).toEqual([{ type: 'text', text: mockText(16) }]);
    expect((mock.stats.lastBody!.messages as unknown[]).at(-1)).toEqual({
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: use.id, content: '25 C' }],
    });
    expect((await ledgerRow(first.id)).amount_micros).toBe(
      usageCostMicros({ prompt_tokens: first.usage.input_tokens, completion_tokens: MOCK_TOOL_COMPLETION_TOKENS }, PRICES),
    );
    expect((await ledgerRow(second.id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: second.usage.input_tokens, completion_tokens: 16 }, PRICES));
  });

  it('thinking: the signature survives the round trip; unsigned thinking is dropped; a forged signature is the vendor 400, charging nothing', async () => {
    const t = await stack.tenant('1.00');
    const c = client(t.key);
    const thinking = { type: 'enabled' as const, budget_tokens: 2048 };
    const stream = c.messages.stream({ model: 'msgclaude/thinking', max_tokens: 4096, thinking, messages: [{ role: 'user', content: 'think' }] });
    const deltas: string[] = [];
    stream.on('streamEvent', (e) => {
      if (e.type === 'content_block_delta') deltas.push(e.delta.type);
    });
    const first = await stream.finalMessage();
    // text deltas that reach the worker in one read travel as one
    expect(deltas.slice(0, 5)).toEqual(['thinking_delta', 'thinking_delta', 'thinking_delta', 'signature_delta', 'text_delta']);
    expect(new Set(deltas.slice(4))).toEqual(new Set(['text_delta']));
    const block = first.content[0] as Anthropic.ThinkingBlock;
    expect(block).toMatchObject({ type: 'thinking', thinking: MOCK_REASONING.join('') });
    expect(block.signature).toMatch(/^mocksig_/);
    expect(first.usage.output_tokens).toBe(16 + MOCK_REASONING.length);
    const unsigned = { type: 'thinking' as const, thinking: 'reasoning another vendor showed', signature: '' };
    const history = (assistant: Anthropic.ContentBlockParam[]): Anthropic.MessageParam[] => [
      { role: 'user', content: 'think' },
      { role: 'assistant', content: assistant },
      { role: 'user', content: 'again' },
    ];
    const second = await c.messages.create({ model: 'msgclaude/thinking', max_tokens: 4096, thinking, messages: history([unsigned, ...first.content]) });
    expect(second.content[1]).toEqual({ type: 'text', text: mockText(16) });
    expect((mock.stats.lastBody!.messages as Array<{ content: unknown }>)[1].content).toEqual([
      { type: 'thinking', thinking: block.thinking, signature: block.signature },
      { type: 'text', text: mockText(16) },
    ]);
    const forged = { ...block, signature: 'mocksig_forged' };
    const refused = await c.messages
      .create({ model: 'msgclaude/thinking', max_tokens: 4096, thinking, messages: history([forged]) })
      .withResponse()
      .catch((e: unknown) => e as InstanceType<typeof Anthropic.BadRequestError>);
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    const bad = refused as InstanceType<typeof Anthropic.BadRequestError>;
    expect(bad.error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'messages.1.content.0: Invalid `signature` in `thinking` block' },
    });
    const requestId = bad.headers!.get('request-id')!;
    expect((await ledgerRow(requestId)).amount_micros).toBe(0n);
  });

  it('cache_control reaches the vendor; cache writes (5 min and 1 h) and reads are billed at their own prices', async () => {
    const t = await stack.tenant('1.00');
    const c = client(t.key);
    const nonce = Math.random().toString(36).slice(2);
    const system: Anthropic.TextBlockParam[] = [
      { type: 'text', text: `Rules ${nonce}. ${'Always be exact. '.repeat(30)}`, cache_control: { type: 'ephemeral', ttl: '1h' } },
      { type: 'text', text: `More rules. ${'Never guess. '.repeat(20)}`, cache_control: { type: 'ephemeral' } },
    ];
    const ask = (text: string) => c.messages.create({ model: 'msgclaude/cache', max_tokens: 5, system, messages: [{ role: 'user', content: text }] });
    const first = await ask('first question');
    expect((mock.stats.lastBody!.system as unknown[]).map((b) => (b as { cache_control?: unknown }).cache_control)).toEqual([
      { type: 'ephemeral', ttl: '1h' },
      { type: 'ephemeral' },
    ]);
    const written = lastClaudeUsage();
    expect(written.anthropic.cache_creation_input_tokens).toBeGreaterThan(0);
    expect(first.usage).toMatchObject({
      input_tokens: written.anthropic.input_tokens,
      cache_creation_input_tokens: written.anthropic.cache_creation_input_tokens,
      cache_read_input_tokens: 0,
    });
    const second = await ask('second question');
    const read = lastClaudeUsage();
    expect(read.anthropic.cache_read_input_tokens).toBe(written.anthropic.cache_creation_input_tokens);
    expect(second.usage).toMatchObject({
      input_tokens: read.anthropic.input_tokens,
      cache_read_input_tokens: read.anthropic.cache_read_input_tokens,
      cache_creation_input_tokens: 0,
    });
    const rows = [await ledgerRow(first.id), await ledgerRow(second.id)];
    expect(rows[0]).toMatchObject({
      amount_micros: usageCostMicros(written.billed, CACHE_PRICES),
      cache_write_tokens: written.billed.cache_write_tokens || null,
    });
    expect(rows[1]).toMatchObject({ amount_micros: usageCostMicros(read.billed, CACHE_PRICES), cached_tokens: read.billed.cached_tokens });
    expect(rows[1].amount_micros).toBeLessThan(rows[0].amount_micros);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - rows[0].amount_micros - rows[1].amount_micros);
  });

  it('a top-level cache_control (automatic caching) reaches the vendor and its count endpoint, billed as the vendor counts; a translated model never gets it', async () => {
    const t = await stack.tenant('1.00');
    const auto = { type: 'ephemeral', ttl: '1h' };
    const res = await post(
      '/v1/messages',
      { model: 'msgclaude/cache', max_tokens: 5, cache_control: auto, messages: [{ role: 'user', content: 'cache it all' }] },
      { 'x-api-key': t.key },
    );
    expect(res.status).toBe(200);
    const msg = await res.json();
    expect(mock.stats.lastBody).toMatchObject({ model: 'mock-claude', cache_control: { type: 'ephemeral', ttl: '1h' } });
    const billed = lastClaudeUsage().billed;
    const row = await ledgerRow(msg.id);
    expect(row.amount_micros).toBe(usageCostMicros(billed, CACHE_PRICES));
    const counted = await post(
      '/v1/messages/count_tokens',
      { model: 'msgclaude/cache', cache_control: auto, messages: [{ role: 'user', content: 'cache it all' }] },
      { 'x-api-key': t.key },
    );
    expect(counted.status).toBe(200);
    expect(mock.stats.lastBody).toMatchObject({ model: 'mock-claude', cache_control: { type: 'ephemeral', ttl: '1h' } });
    const translated = await post(
      '/v1/messages',
      { model: 'msgvendor/ok', max_tokens: 5, cache_control: auto, messages: [{ role: 'user', content: 'no cache field here' }] },
      { 'x-api-key': t.key },
    );
    expect(translated.status).toBe(200);
    expect(mock.stats.lastBody).toMatchObject({ model: 'gpt-4o-mini' });
    expect(mock.stats.lastBody).not.toHaveProperty('cache_control');
    const chatRow = await ledgerRow((await translated.json()).id);
    expect(chatRow.amount_micros).toBe(usageCostMicros({ prompt_tokens: chatRow.input_tokens, completion_tokens: 5 }, PRICES));
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - row.amount_micros - chatRow.amount_micros);
  });

  it('more than 4 cache breakpoints (the top-level one included) are a 400 before anything is held', async () => {
    const t = await stack.tenant('1.00');
    const cc = { type: 'ephemeral' };
    const four = {
      model: 'msgclaude/cache',
      max_tokens: 5,
      system: [
        { type: 'text', text: 'a', cache_control: cc },
        { type: 'text', text: 'b', cache_control: cc },
      ],
      tools: [{ name: 'f', input_schema: { type: 'object' }, cache_control: cc }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'q', cache_control: cc }] }],
    };
    const before = mock.stats.requests;
    for (const path of ['/v1/messages', '/v1/messages/count_tokens']) {
      const res = await post(path, { ...four, cache_control: cc }, { 'x-api-key': t.key });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: 'cache_control: A maximum of 4 blocks with cache_control may be provided (a top-level cache_control counts as one). Found 5.',
        },
      });
    }
    expect(mock.stats.requests).toBe(before);
    expect(await holdsOf(t.tenantId)).toBe(0);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
    // four are accepted
    const ok = await post('/v1/messages', four, { 'x-api-key': t.key });
    expect(ok.status).toBe(200);
    const row = await ledgerRow((await ok.json()).id);
    expect(row.amount_micros).toBe(usageCostMicros(lastClaudeUsage().billed, CACHE_PRICES));
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - row.amount_micros);
  });

  it('a 1-hour cache marker is billed as a 1-hour write; images are billed as the vendor counts them', async () => {
    const t = await stack.tenant('1.00');
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
    const msg = await client(t.key).messages.create({
      model: 'msgclaude/cache',
      max_tokens: 5,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
            { type: 'text', text: `describe ${Math.random()}`, cache_control: { type: 'ephemeral', ttl: '1h' } },
          ],
        },
      ],
    });
    const { anthropic, billed } = lastClaudeUsage();
    expect(anthropic.cache_creation.ephemeral_1h_input_tokens).toBe(MOCK_CLAUDE_IMAGE_TOKENS + 2);
    expect(msg.usage.cache_creation).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: MOCK_CLAUDE_IMAGE_TOKENS + 2 });
    const row = await ledgerRow(msg.id);
    expect(row).toMatchObject({ amount_micros: usageCostMicros(billed, CACHE_PRICES), cache_write_1h_tokens: MOCK_CLAUDE_IMAGE_TOKENS + 2 });
  });

  it('count_tokens: the vendor’s own count, free (no debit, no hold), counted for the key', async () => {
    const t = await stack.tenant('1.00');
    const body = {
      system: 'S',
      messages: [{ role: 'user' as const, content: 'count me please' }],
      tools: [{ name: 'f', input_schema: { type: 'object' as const } }],
    };
    const { data, response } = await client(t.key)
      .messages.countTokens({ model: 'msgclaude/ok', ...body })
      .withResponse();
    expect(data).toEqual({ input_tokens: mockClaudePromptTokens(body) });
    expect(response.headers.get('request-id')).toMatch(/^gen-/);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
    expect(await holdsOf(t.tenantId)).toBe(0);
    const { rows } = await stack.db.query('select count(*)::int as n from ledger where tenant_id = $1 and kind = $2', [t.tenantId, 'debit']);
    expect(rows[0].n).toBe(0);
  });

  it('count_tokens on an OpenAI-compatible model: our tokenizer estimate of the translated prompt; each count counts against the key’s rate limit', async () => {
    const t = await stack.tenant('1.00', { rateLimitRequests: 1, rateLimitIntervalS: 3600 });
    const body = {
      system: 'You are terse.',
      messages: [{ role: 'user' as const, content: 'how many tokens is this?' }],
      tools: [{ name: 'f', input_schema: { type: 'object' as const } }],
    };
    const counted = await client(t.key).messages.countTokens({ model: 'msgvendor/ok', ...body });
    const model = (await stack.db.query("select * from models where id = 'msgvendor/ok'")).rows[0];
    const chat = toChat(body, model, { stream: false });
    expect(counted).toEqual({ input_tokens: await estimateCallPromptTokens({ job: { body: chat }, model } as unknown as UpstreamCall) });
    const limited = await post('/v1/messages/count_tokens', { model: 'msgvendor/ok', ...body }, { 'x-api-key': t.key });
    expect(limited.status).toBe(429);
    expect(await limited.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });

  it('the vendor’s 529 is our 529 overloaded_error, in Anthropic’s shape', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(
      '/v1/messages',
      { model: 'msgclaude/overloaded', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] },
      { 'x-api-key': t.key },
    );
    expect(res.status).toBe(529);
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'overloaded_error', message: 'The upstream provider is overloaded; retry shortly.' } });
  });
});

describe('chat completions to an Anthropic-protocol model (OpenRouter-style prompt caching)', () => {
  it('cache_control on content parts reaches the vendor, images become image blocks, cache reads are billed at the cached price', async () => {
    const t = await stack.tenant('1.00');
    const openai = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key, maxRetries: 0 });
    const nonce = Math.random().toString(36).slice(2);
    const system = { role: 'system', content: [{ type: 'text', text: `Handbook ${nonce}. ${'Be exact. '.repeat(40)}`, cache_control: { type: 'ephemeral' } }] };
    const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } };
    const ask = (q: string) =>
      openai.chat.completions.create({
        model: 'msgclaude/cache',
        max_tokens: 5,
        messages: [system, { role: 'user', content: [image, { type: 'text', text: q }] }],
      } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const first = await ask('one');
    expect(mock.stats.lastBody).toMatchObject({
      system: [{ type: 'text', cache_control: { type: 'ephemeral' } }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'text', text: 'one' },
          ],
        },
      ],
    });
    const written = lastClaudeUsage();
    const second = await ask('two');
    const read = lastClaudeUsage();
    expect(read.anthropic.cache_read_input_tokens).toBe(written.anthropic.cache_creation_input_tokens);
    // OpenAI's shape: prompt_tokens counts everything, the cache read is a detail of it
    expect(second.usage).toMatchObject({ prompt_tokens: read.billed.prompt_tokens, prompt_tokens_details: { cached_tokens: read.billed.cached_tokens } });
    const rows = [await ledgerRow(first.id), await ledgerRow(second.id)];
    expect(rows.map((r) => r.amount_micros)).toEqual([usageCostMicros(written.billed, CACHE_PRICES), usageCostMicros(read.billed, CACHE_PRICES)]);
    expect(rows[1].route).toBe('chat');
  });
});

describe('the Anthropic SDK, translated to an OpenAI-compatible vendor and to the sim', () => {
  it('messages.create and messages.stream on an OpenAI-compatible model: the chat body it was sent, usage translated, billed exactly', async () => {
    const t = await stack.tenant('1.00');
    const c = client(t.key);
    const request = {
      model: 'msgvendor/ok',
      max_tokens: 32000,
      system: [{ type: 'text' as const, text: 'Be brief.', cache_control: { type: 'ephemeral' as const } }],
      messages: [{ role: 'user' as const, content: 'hello there' }],
      metadata: { user_id: 'u-42' },
      top_k: 5,
      thinking: { type: 'adaptive' as const },
    };
    const msg = await c.messages.create(request);
    expect(mock.stats.lastBody).toEqual({
      model: 'gpt-4o-mini',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hello there' },
      ],
      user: 'u-42',
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 4096,
    });
    const prompt = mockPromptTokens(mock.stats.lastBody!);
    expect(msg).toMatchObject({ model: 'msgvendor/ok', stop_reason: 'end_turn', content: [{ type: 'text', text: mockText(16) }] });
    expect(msg.usage).toMatchObject({ input_tokens: prompt, output_tokens: 16 });
    expect((await ledgerRow(msg.id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: prompt, completion_tokens: 16 }, PRICES));
    const streamed = await c.messages.stream({ ...request, max_tokens: 3 }).finalMessage();
    expect(streamed).toMatchObject({
      stop_reason: 'max_tokens',
      content: [{ type: 'text', text: mockText(3) }],
      usage: { input_tokens: prompt, output_tokens: 3 },
    });
    expect((await ledgerRow(streamed.id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: prompt, completion_tokens: 3 }, PRICES));
  });

  it('thinking becomes reasoning_effort for a model the catalog marks as reasoning; its reasoning comes back as unsigned thinking', async () => {
    const t = await stack.tenant('1.00');
    const msg = await client(t.key).messages.create({
      model: 'msgvendor/reasoning',
      max_tokens: 30000,
      thinking: { type: 'enabled', budget_tokens: 20000 },
      messages: [{ role: 'user', content: 'hmm' }],
    });
    expect(mock.stats.lastBody).toMatchObject({ reasoning_effort: 'high', max_completion_tokens: 4096 });
    expect(msg.content).toEqual([
      { type: 'thinking', thinking: MOCK_REASONING.join(''), signature: '' },
      { type: 'text', text: mockText(16) },
    ]);
  });

  it('a tool-use round trip on an OpenAI-compatible model: tool_calls ↔ tool_use, tool_result → a tool message', async () => {
    const t = await stack.tenant('1.00');
    const c = client(t.key);
    const tools: Anthropic.Tool[] = [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
    const stream = c.messages.stream({
      model: 'msgvendor/agent',
      max_tokens: 100,
      tools,
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'weather?' }],
    });
    const first = await stream.finalMessage();
    expect(mock.stats.lastBody).toMatchObject({
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: tools[0].input_schema } }],
      tool_choice: 'required',
    });
    expect(first.stop_reason).toBe('tool_use');
    expect(first.content).toEqual([{ type: 'tool_use', id: MOCK_TOOL_CALL.id, name: MOCK_TOOL_CALL.name, input: JSON.parse(MOCK_TOOL_CALL.arguments) }]);
    const second = await c.messages.create({
      model: 'msgvendor/agent',
      max_tokens: 100,
      tools,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: MOCK_TOOL_CALL.id, content: '25 C' }] },
      ],
    });
    expect((mock.stats.lastBody!.messages as unknown[]).slice(1)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: MOCK_TOOL_CALL.id, type: 'function', function: { name: MOCK_TOOL_CALL.name, arguments: MOCK_TOOL_CALL.arguments } }],
      },
      { role: 'tool', tool_call_id: MOCK_TOOL_CALL.id, content: '25 C' },
    ]);
    expect(second).toMatchObject({ stop_reason: 'end_turn', content: [{ type: 'text', text: mockText(16) }] });
  });

  it('sim/echo: create and stream, the sim’s exact counts', async () => {
    const t = await stack.tenant('1.00');
    const c = client(t.key);
    const text = 'echo these five words';
    const prompt = promptTokens([{ content: 'sys' }, { content: text }]);
    const msg = await c.messages.create({ model: 'sim/echo', max_tokens: 100, system: 'sys', messages: [{ role: 'user', content: text }] });
    expect(msg).toMatchObject({ content: [{ type: 'text', text }], stop_reason: 'end_turn', usage: { input_tokens: prompt, output_tokens: 4 } });
    const streamed = await c.messages.stream({ model: 'sim/echo', max_tokens: 2, system: 'sys', messages: [{ role: 'user', content: text }] }).finalMessage();
    expect(streamed).toMatchObject({
      content: [{ type: 'text', text: 'echo these' }],
      stop_reason: 'max_tokens',
      usage: { input_tokens: prompt, output_tokens: 2 },
    });
    expect((await ledgerRow(msg.id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: prompt, completion_tokens: 4 }, SIM_PRICES.echo));
    expect((await ledgerRow(streamed.id)).amount_micros).toBe(usageCostMicros({ prompt_tokens: prompt, completion_tokens: 2 }, SIM_PRICES.echo));
    // a count on the sim is the sim's own prompt count
    expect(await c.messages.countTokens({ model: 'sim/echo', system: 'sys', messages: [{ role: 'user', content: text }] })).toEqual({ input_tokens: prompt });
  });
});

describe('the Vercel AI SDK’s Anthropic provider', () => {
  it('generateText and streamText, with a tool, against our base URL', async () => {
    const t = await stack.tenant('1.00');
    const anthropic = createAnthropic({ baseURL: `${origin}/v1`, apiKey: t.key });
    const generated = await generateText({ model: anthropic('msgclaude/ok'), prompt: 'hello there', maxOutputTokens: 5 });
    expect(generated.text).toBe(mockText(5));
    const input = promptTokens([{ content: 'hello there' }]);
    expect(generated.usage).toMatchObject({ inputTokens: input, outputTokens: 5 });
    const first = await ledgerRow(generated.response.id);
    expect(first).toMatchObject({
      amount_micros: usageCostMicros({ prompt_tokens: input, completion_tokens: 5 }, PRICES),
      input_tokens: input,
      output_tokens: 5,
    });
    const streamed = streamText({
      model: anthropic('msgclaude/agent'),
      prompt: 'weather?',
      maxOutputTokens: 100,
      tools: { get_weather: tool({ description: 'weather', inputSchema: z.object({ city: z.string(), unit: z.string() }) }) },
    });
    const calls = await streamed.toolCalls;
    expect(calls.map((c) => [c.toolName, c.input])).toEqual([[MOCK_TOOL_CALL.name, JSON.parse(MOCK_TOOL_CALL.arguments)]]);
    expect(await streamed.finishReason).toBe('tool-calls');
    // each call debited exactly what the vendor reported, and nothing else
    const toolUsage = lastClaudeUsage().billed;
    const second = await ledgerRow((await streamed.response).id);
    expect(second).toMatchObject({ amount_micros: usageCostMicros(toolUsage, PRICES), output_tokens: toolUsage.completion_tokens });
    expect(await balanceOf(t.tenantId)).toBe(
      1_000_000n - usageCostMicros({ prompt_tokens: input, completion_tokens: 5 }, PRICES) - usageCostMicros(toolUsage, PRICES),
    );
    expect(await holdsOf(t.tenantId)).toBe(0);
  });
});

describe("refusals, in Anthropic's shape, charging nothing", () => {
  const body = { model: 'msgclaude/ok', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] };

  it('wrong key 401, allowlist 403, empty balance 402, unknown model 404, bad field 400, old anthropic-version 400', async () => {
    const t = await stack.tenant('1.00', { models: ['sim/echo'] });
    const poor = await stack.tenant('0');
    const answer = async (res: Response) => ({ status: res.status, body: await res.json(), requestId: res.headers.get('request-id') });
    const cases = [
      [await answer(await post('/v1/messages', body, { 'x-api-key': 'sk-cat-v1-nope' })), 401, 'authentication_error'],
      [await answer(await post('/v1/messages', body, { authorization: 'Bearer sk-cat-v1-nope' })), 401, 'authentication_error'],
      [await answer(await post('/v1/messages', body, { 'x-api-key': t.key })), 403, 'permission_error'],
      [await answer(await post('/v1/messages', body, { 'x-api-key': poor.key })), 402, 'billing_error'],
      [await answer(await post('/v1/messages', { ...body, model: 'nope/none' }, { 'x-api-key': poor.key })), 404, 'not_found_error'],
      [await answer(await post('/v1/messages', { ...body, max_tokens: undefined }, { 'x-api-key': poor.key })), 400, 'invalid_request_error'],
      [await answer(await post('/v1/messages', body, { 'x-api-key': poor.key, 'anthropic-version': '2023-01-01' })), 400, 'invalid_request_error'],
      [await answer(await post('/v1/messages/count_tokens', { ...body, model: 'msgclaude/ok' }, { 'x-api-key': t.key })), 403, 'permission_error'],
      [await answer(await post('/v1/messages/count_tokens', { ...body, model: 'nope/none' }, { 'x-api-key': t.key })), 404, 'not_found_error'],
    ] as const;
    for (const [got, status, type] of cases) {
      expect({ status: got.status, type: got.body.type, errorType: got.body.error.type }).toEqual({ status, type: 'error', errorType: type });
      expect(Object.keys(got.body)).toEqual(['type', 'error']);
      expect(typeof got.body.error.message).toBe('string');
    }
    expect(cases[5][0].body.error.message).toBe('max_tokens: Field required');
    expect(cases[6][0].body.error.message).toContain('anthropic-version');
    for (const tenant of [t, poor]) {
      expect(await balanceOf(tenant.tenantId)).toBe(tenant === t ? 1_000_000n : 0n);
      expect(await holdsOf(tenant.tenantId)).toBe(0);
    }
  });

  it('refusals answered before the body is read: no key 401, a body over the limit 413', async () => {
    const t = await stack.tenant('1.00');
    const noKey = await post('/v1/messages', body, {});
    expect(noKey.status).toBe(401);
    expect((await noKey.json()).error.type).toBe('authentication_error');
    const big = await post('/v1/messages', { ...body, messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY) }] }, { 'x-api-key': t.key });
    expect(big.status).toBe(413);
    expect(await big.json()).toMatchObject({ type: 'error', error: { type: 'request_too_large' } });
    expect(big.headers.get('request-id')).toMatch(/^gen-/);
    expect(await holdsOf(t.tenantId)).toBe(0);
  });

  it('the SDK surfaces them as its typed errors; GET /v1/messages is a 405 in the same shape', async () => {
    const poor = await stack.tenant('0');
    await expect(client(poor.key).messages.create({ ...body, messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(Anthropic.APIError);
    const err = await client('sk-cat-v1-wrong')
      .messages.create({ ...body, messages: [{ role: 'user', content: 'x' }] })
      .catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    const res = await fetch(`${origin}/v1/messages`);
    expect(res.status).toBe(405);
    expect((await res.json()).error.type).toBe('invalid_request_error');
  });

  it('a server tool (billed per use) is refused before any hold', async () => {
    const t = await stack.tenant('1.00');
    const res = await post('/v1/messages', { ...body, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, { 'x-api-key': t.key });
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toMatch(/^tools\.0\.type: "web_search_20250305": server tools are billed/);
    expect(await holdsOf(t.tenantId)).toBe(0);
  });
});

describe('headers and query Claude Code sends', () => {
  it('x-api-key, ?beta=true and a long anthropic-beta list: the known betas reach the vendor, the others never break a request', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(
      '/v1/messages?beta=true',
      {
        ...{ model: 'msgclaude/ok', max_tokens: 32000, stream: true, messages: [{ role: 'user', content: 'hi' }] },
        context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
        output_config: { effort: 'high' },
        thinking: { type: 'adaptive', display: 'omitted' },
      },
      { 'x-api-key': t.key, 'anthropic-beta': 'claude-code-20250219,context-management-2025-06-27,effort-2025-11-24,some-future-beta-2030-01-01' },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const text = await res.text();
    expect(text).toContain('event: message_stop');
    expect(mock.stats.lastBody).toMatchObject({
      context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
      output_config: { effort: 'high' },
    });
  });

  it('a client that disconnects mid-stream is billed what was generated (the vendor’s prompt count, our count of the output)', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const res = await post(
      '/v1/messages',
      { model: 'msgclaude/slow', max_tokens: 1000, stream: true, messages: [{ role: 'user', content: 'tell me a long story' }] },
      { 'x-api-key': t.key },
      controller.signal,
    );
    const requestId = res.headers.get('request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"text_delta"/g) ?? []).length < 3) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    const row = await ledgerRow(requestId);
    expect(row.outcome).toBe('cancelled');
    expect(row.estimated).toBe(true);
    expect(row.input_tokens).toBe(promptTokens([{ content: 'tell me a long story' }]));
    expect(row.output_tokens).toBeGreaterThanOrEqual(3);
    expect(row.output_tokens).toBeLessThan(20); // 200 would have been generated
    expect(row.amount_micros).toBe(usageCostMicros({ prompt_tokens: row.input_tokens, completion_tokens: row.output_tokens }, PRICES));
    await stack.waitNoHolds(t.tenantId);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n - row.amount_micros);
  });
});
