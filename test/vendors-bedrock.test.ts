import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockBedrock, startMockBedrock } from '../bench/mock-upstream/bedrock.ts';
import { MOCK_TOOL_CALL } from '../bench/mock-upstream/content.ts';
import { addDeployment, upsertModel } from '../src/db/models.ts';
import { estimateTokens } from '../src/providers/shared/estimate.ts';
import { debitOf, expectBalanceEqualsLedger, sseChunks } from './helpers/ledger.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Amazon Bedrock's Converse API as a vendor protocol (src/providers/bedrock) through the whole
// stack, against a mock runtime that verifies each request's SigV4 signature (or its Bedrock API
// key) and answers in ConverseStream's binary event-stream framing: chat streamed and not, tools,
// cache reads and writes and reasoning billed to the micro-real, a throttled deployment failed
// over, a wrong secret refused by the vendor and never billed.

const REGION = 'sa-east-1';
const AKID = 'AKIAMOCKBEDROCK0001';
const SECRET = 'mockSecretAccessKey/0123456789abcdefghijklmn';
const TEMP_AKID = 'ASIAMOCKBEDROCK0002';
const TEMP_SECRET = 'mockTemporarySecret/0123456789abcdefghijkl';
const TOKEN = 'mockSessionToken0123456789';
const API_KEY = 'ABSKbW9jay1iZWRyb2NrLWFwaS1rZXk';
const IN = 3_000_000n; // µBRL per 1M tokens
const OUT = 15_000_000n;
const READ = 300_000n;
const WRITE = 3_750_000n;

let stack: TestStack;
let bedrock: MockBedrock;

beforeAll(async () => {
  bedrock = await startMockBedrock({
    region: REGION,
    keys: { [AKID]: SECRET, [TEMP_AKID]: TEMP_SECRET },
    sessionTokens: { [TEMP_AKID]: TOKEN },
    apiKey: API_KEY,
    outputTokens: 6,
  });
  stack = await startStack({
    gateways: 1,
    workers: 1,
    env: {
      BEDROCK_KEYS: `${AKID}:${SECRET}`,
      BEDROCK_TEMP_KEYS: `${TEMP_AKID}:${TEMP_SECRET}:${TOKEN}`,
      BEDROCK_API_KEY: API_KEY,
      BEDROCK_WRONG_KEYS: `${AKID}:not-the-secret`,
      WORKER_UPSTREAM_KEYS: 'BEDROCK_KEYS,BEDROCK_TEMP_KEYS,BEDROCK_API_KEY,BEDROCK_WRONG_KEYS',
    },
  });
  const base = `${bedrock.url}?region=${REGION}`;
  const model = (id: string, upstream_model: string, api_key_env = 'BEDROCK_KEYS', over: Record<string, unknown> = {}) =>
    upsertModel(stack.db, {
      id,
      pool: 'openai',
      protocol: 'bedrock',
      upstream_model,
      base_url: base,
      api_key_env,
      input_price: IN,
      output_price: OUT,
      cached_input_price: READ,
      cache_write_price: WRITE,
      context_length: 200_000,
      ...over,
    });
  await model('bedrock/claude', 'sa.anthropic.claude-sonnet-4-v1:0');
  await model('bedrock/thinking', 'mock-reasoning', 'BEDROCK_KEYS', { reasoning: true });
  await model('bedrock/tools', 'mock-tools');
  await model('bedrock/temp', 'sa.anthropic.claude-sonnet-4-v1:0', 'BEDROCK_TEMP_KEYS');
  await model('bedrock/apikey', 'sa.anthropic.claude-sonnet-4-v1:0', 'BEDROCK_API_KEY');
  await model('bedrock/wrong', 'sa.anthropic.claude-sonnet-4-v1:0', 'BEDROCK_WRONG_KEYS');
  await model('bedrock/failover', 'mock-throttled', 'BEDROCK_KEYS', { weight: 1000 });
  await addDeployment(stack.db, 'dep_bedrock_failover_b', {
    model_id: 'bedrock/failover',
    name: 'second-region',
    protocol: 'bedrock',
    base_url: base,
    api_key_env: 'BEDROCK_KEYS',
    upstream_model: 'sa.anthropic.claude-sonnet-4-v1:0',
  });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await bedrock?.close();
});

const chat = (key: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const micros = (u: { inputTokens: number; outputTokens: number; cacheReadInputTokens: number; cacheWriteInputTokens: number }) =>
  (BigInt(u.inputTokens) * IN + BigInt(u.cacheReadInputTokens) * READ + BigInt(u.cacheWriteInputTokens) * WRITE + BigInt(u.outputTokens) * OUT + 999_999n) /
  1_000_000n;

const debit = (requestId: string) => debitOf(stack, requestId);

const balanceEqualsLedger = (tenantId: string) => expectBalanceEqualsLedger(stack, tenantId);

describe('Amazon Bedrock (Converse) deployments', () => {
  it('not streamed, SigV4-signed: the Converse body, cache reads and writes billed at their prices', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'bedrock/claude',
      messages: [
        { role: 'system', content: [{ type: 'text', text: 'You are a terse assistant for the handbook.', cache_control: { type: 'ephemeral' } }] },
        { role: 'user', content: 'Say hello' },
      ],
      max_tokens: 4,
      temperature: 0.3,
      stop: ['END'],
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.choices[0]).toMatchObject({ message: { content: 'Hello world foo bar' }, finish_reason: 'length' });
    expect(bedrock.stats.lastAuth).toBe('sigv4');
    expect(bedrock.stats.lastSignedHeaders).toEqual(expect.arrayContaining(['host', 'x-amz-date', 'x-amz-content-sha256', 'content-type']));
    expect(bedrock.stats.lastPath).toBe('/model/sa.anthropic.claude-sonnet-4-v1%3A0/converse-stream');
    expect(bedrock.stats.lastBody).toEqual({
      system: [{ text: 'You are a terse assistant for the handbook.' }, { cachePoint: { type: 'default' } }],
      messages: [{ role: 'user', content: [{ text: 'Say hello' }] }],
      inferenceConfig: { maxTokens: 4, temperature: 0.3, stopSequences: ['END'] },
    });
    const v = bedrock.stats.usages.at(-1)!;
    expect([v.cacheReadInputTokens, v.cacheWriteInputTokens, v.outputTokens]).toEqual([40, 10, 4]);
    const prompt = v.inputTokens + 40 + 10;
    expect(body.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 40 } });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v));
    expect(row).toMatchObject({ input_tokens: prompt, cached_tokens: 40, cache_write_tokens: 10, output_tokens: 4 });
    await balanceEqualsLedger(t.tenantId);
  });

  it('streamed, a reasoning model: a thinking budget sent, reasoning relayed, reasoning tokens counted, output billed as Bedrock reported it', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'bedrock/thinking',
      messages: [{ role: 'user', content: 'Think, then say hello' }],
      max_tokens: 2000,
      reasoning: { max_tokens: 1024 },
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const chunks = sseChunks(await res.text());
    expect(chunks.map((c) => c.choices?.[0]?.delta?.reasoning ?? '').join('')).toBe('Let me think');
    expect(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('')).toBe('Hello world foo bar baz qux');
    expect(bedrock.stats.lastBody).toMatchObject({ additionalModelRequestFields: { thinking: { type: 'enabled', budget_tokens: 1024 } } });
    const v = bedrock.stats.usages.at(-1)!;
    expect(v.outputTokens).toBe(9);
    const reasoning = await estimateTokens('Let me think');
    expect(chunks.find((c) => c.usage)?.usage).toMatchObject({
      prompt_tokens: v.inputTokens,
      completion_tokens: 9,
      completion_tokens_details: { reasoning_tokens: reasoning },
    });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v));
    expect(row).toMatchObject({ output_tokens: 9, reasoning_tokens: reasoning });
    await balanceEqualsLedger(t.tenantId);
  });

  it('tools: a toolUse relayed as a tool call, and its result sent back as a toolResult in a user turn', async () => {
    const t = await stack.tenant('1.00');
    const tools = [
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    const res = await chat(t.key, {
      model: 'bedrock/tools',
      messages: [{ role: 'user', content: 'Weather in São Paulo?' }],
      tools,
      tool_choice: 'required',
      stream: true,
    });
    expect(res.status).toBe(200);
    const chunks = sseChunks(await res.text());
    const calls = chunks.flatMap((c) => c.choices?.[0]?.delta?.tool_calls ?? []);
    expect(calls[0]).toMatchObject({ index: 0, id: MOCK_TOOL_CALL.id, type: 'function', function: { name: MOCK_TOOL_CALL.name } });
    expect(calls.map((c) => c.function?.arguments ?? '').join('')).toBe(MOCK_TOOL_CALL.arguments);
    expect(chunks.find((c) => c.choices?.[0]?.finish_reason)?.choices[0].finish_reason).toBe('tool_calls');
    expect(bedrock.stats.lastBody).toMatchObject({
      toolConfig: {
        tools: [{ toolSpec: { name: 'get_weather', description: 'Weather now', inputSchema: { json: tools[0]!.function.parameters } } }],
        toolChoice: { any: {} },
      },
    });
    const v = bedrock.stats.usages.at(-1)!;
    expect(BigInt((await debit(res.headers.get('x-request-id')!)).amount_micros)).toBe(micros(v));

    const back = await chat(t.key, {
      model: 'bedrock/claude',
      tools,
      max_tokens: 3,
      messages: [
        { role: 'user', content: 'Weather in São Paulo?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: MOCK_TOOL_CALL.id, type: 'function', function: { name: MOCK_TOOL_CALL.name, arguments: MOCK_TOOL_CALL.arguments } }],
        },
        { role: 'tool', tool_call_id: MOCK_TOOL_CALL.id, content: '24 °C, sunny' },
      ],
    });
    expect(back.status).toBe(200);
    expect((await back.json()).choices[0].message.content).toBe('Hello world foo');
    expect((bedrock.stats.lastBody as { messages: unknown }).messages).toEqual([
      { role: 'user', content: [{ text: 'Weather in São Paulo?' }] },
      { role: 'assistant', content: [{ toolUse: { toolUseId: MOCK_TOOL_CALL.id, name: MOCK_TOOL_CALL.name, input: JSON.parse(MOCK_TOOL_CALL.arguments) } }] },
      { role: 'user', content: [{ toolResult: { toolUseId: MOCK_TOOL_CALL.id, content: [{ text: '24 °C, sunny' }] } }] },
    ]);
    const v2 = bedrock.stats.usages.at(-1)!;
    expect(BigInt((await debit(back.headers.get('x-request-id')!)).amount_micros)).toBe(micros(v2));
    await balanceEqualsLedger(t.tenantId);
  });

  it('temporary credentials (a signed session token) and a Bedrock API key as Bearer both authenticate', async () => {
    const t = await stack.tenant('1.00');
    const temp = await chat(t.key, { model: 'bedrock/temp', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(temp.status).toBe(200);
    await temp.text();
    expect(bedrock.stats.lastAuth).toBe('sigv4');
    expect(bedrock.stats.lastSignedHeaders).toContain('x-amz-security-token');
    const key = await chat(t.key, { model: 'bedrock/apikey', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(key.status).toBe(200);
    await key.text();
    expect(bedrock.stats.lastAuth).toBe('api-key');
    await stack.waitSettled([temp.headers.get('x-request-id')!, key.headers.get('x-request-id')!]);
    await balanceEqualsLedger(t.tenantId);
  });

  it('a wrong secret: the mock finds the signature does not match (403) → 502 upstream_auth_failed, nothing billed', async () => {
    const t = await stack.tenant('1.00');
    const refused = bedrock.stats.refused;
    const res = await chat(t.key, { model: 'bedrock/wrong', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toMatchObject({ code: 'upstream_auth_failed' });
    expect(bedrock.stats.refused).toBe(refused + 1);
    await stack.waitNoHolds(t.tenantId);
    const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(BigInt(rows[0].balance_micros)).toBe(1_000_000n);
  });

  it('a throttled deployment (429 ThrottlingException) fails over to the next and cools down; billed once', async () => {
    const t = await stack.tenant('1.00');
    const before = bedrock.stats.byModel['mock-throttled'] ?? 0;
    const res = await chat(t.key, { model: 'bedrock/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    // the body said, should it fail (a 503 once, under CI's load, not reproduced since)
    expect([res.status, res.status === 200 ? '' : await res.text()]).toEqual([200, '']);
    expect((await res.json()).choices[0].message.content).toBe('Hello world foo');
    expect(bedrock.stats.byModel['mock-throttled']).toBe(before + 1);
    const v = bedrock.stats.usages.at(-1)!;
    expect(BigInt((await debit(res.headers.get('x-request-id')!)).amount_micros)).toBe(micros(v));
    const again = await chat(t.key, { model: 'bedrock/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(again.status).toBe(200);
    await again.text();
    expect(bedrock.stats.byModel['mock-throttled']).toBe(before + 1);
    await stack.waitSettled([again.headers.get('x-request-id')!]);
    await balanceEqualsLedger(t.tenantId);
  });
});
