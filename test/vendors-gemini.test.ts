import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MOCK_TOOL_CALL } from '../bench/mock-upstream/content.ts';
import { type MockGemini, startMockGemini } from '../bench/mock-upstream/gemini.ts';
import { addDeployment, upsertModel } from '../src/db/models.ts';
import { cli } from './helpers/cli.ts';
import { debitOf, expectBalanceEqualsLedger, sseChunks } from './helpers/ledger.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Google's Gemini API and Vertex AI as a vendor protocol (src/providers/gemini) through the whole
// stack, against a mock that checks the API key (x-goog-api-key) or a Vertex access token it
// minted, and whose token endpoint verifies the service account's RS256-signed JWT: chat streamed
// and not, tools, cached and thoughts tokens billed to the micro-real, a RESOURCE_EXHAUSTED
// deployment failed over, a wrong key refused and never billed, a Vertex model configured with
// `catraca model set --protocol gemini --vertex-project P --region R`.

const API_KEY = 'AIzaMockGeminiKey0123456789abcdefghijk';
const PROJECT = 'catraca-test-br';
const REGION = 'southamerica-east1';
const CLIENT_EMAIL = 'catraca@catraca-test-br.iam.gserviceaccount.com';
const IN = 1_500_000n; // µBRL per 1M tokens
const OUT = 12_000_000n;
const READ = 375_000n;

let stack: TestStack;
let gemini: MockGemini;
let dir: string;

beforeAll(async () => {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  gemini = await startMockGemini({
    apiKey: API_KEY,
    outputTokens: 6,
    vertex: { project: PROJECT, region: REGION, clientEmail: CLIENT_EMAIL, publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString() },
  });
  dir = mkdtempSync(join(tmpdir(), 'catraca-vertex-'));
  const saFile = join(dir, 'service-account.json');
  writeFileSync(
    saFile,
    JSON.stringify({
      type: 'service_account',
      project_id: PROJECT,
      private_key_id: 'mock-key-1',
      private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      client_email: CLIENT_EMAIL,
      token_uri: gemini.tokenUrl,
    }),
    { mode: 0o600 },
  );
  // a second account whose key the token endpoint does not know
  const other = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  const otherFile = join(dir, 'other.json');
  writeFileSync(
    otherFile,
    JSON.stringify({ private_key: other.export({ type: 'pkcs8', format: 'pem' }).toString(), client_email: CLIENT_EMAIL, token_uri: gemini.tokenUrl }),
  );
  stack = await startStack({
    gateways: 1,
    workers: 1,
    env: {
      GEMINI_TEST_KEY: API_KEY,
      GEMINI_WRONG_KEY: 'AIzaNotThisProjectsKey000000000000000',
      VERTEX_SA_FILE: saFile,
      VERTEX_OTHER_SA_FILE: otherFile,
      WORKER_UPSTREAM_KEYS: 'GEMINI_TEST_KEY,GEMINI_WRONG_KEY,VERTEX_SA_FILE,VERTEX_OTHER_SA_FILE',
    },
  });
  const model = (id: string, upstream_model: string, api_key_env = 'GEMINI_TEST_KEY', over: Record<string, unknown> = {}) =>
    upsertModel(stack.db, {
      id,
      pool: 'openai',
      protocol: 'gemini',
      upstream_model,
      base_url: `${gemini.url}/v1beta`,
      api_key_env,
      input_price: IN,
      output_price: OUT,
      cached_input_price: READ,
      context_length: 1_000_000,
      ...over,
    });
  await model('gemini/flash', 'gemini-2.5-flash');
  await model('gemini/cached', 'mock-cached');
  await model('gemini/thinking', 'mock-thinking', 'GEMINI_TEST_KEY', { reasoning: true });
  await model('gemini/tools', 'mock-tools');
  await model('gemini/wrong-key', 'gemini-2.5-flash', 'GEMINI_WRONG_KEY');
  await model('gemini/failover', 'mock-429', 'GEMINI_TEST_KEY', { weight: 1000 });
  await addDeployment(stack.db, 'dep_gemini_failover_b', {
    model_id: 'gemini/failover',
    name: 'second-project',
    protocol: 'gemini',
    base_url: `${gemini.url}/v1beta`,
    api_key_env: 'GEMINI_TEST_KEY',
    upstream_model: 'gemini-2.5-flash',
  });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await gemini?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const micros = (u: Record<string, number>) => {
  const cached = u.cachedContentTokenCount ?? 0;
  const output = u.candidatesTokenCount! + (u.thoughtsTokenCount ?? 0);
  return (BigInt(u.promptTokenCount! - cached) * IN + BigInt(cached) * READ + BigInt(output) * OUT + 999_999n) / 1_000_000n;
};

const debit = (requestId: string) => debitOf(stack, requestId);

const balanceEqualsLedger = (tenantId: string) => expectBalanceEqualsLedger(stack, tenantId);

const vendorUsage = () => gemini.stats.usages.at(-1)!.usageMetadata;

describe('the Gemini API (an API key)', () => {
  it('not streamed: x-goog-api-key, streamGenerateContent?alt=sse, the generateContent body, billed to the µBRL', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'gemini/flash',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello' },
      ],
      max_tokens: 4,
      temperature: 0.5,
      stop: 'END',
    });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.choices[0]).toMatchObject({ message: { content: 'Hello world foo bar' }, finish_reason: 'length' });
    expect(gemini.stats.lastAuth).toBe('api-key');
    expect(gemini.stats.lastPath).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(gemini.stats.lastBody).toEqual({
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      contents: [{ role: 'user', parts: [{ text: 'Say hello' }] }],
      generationConfig: { maxOutputTokens: 4, temperature: 0.5, stopSequences: ['END'] },
    });
    const v = vendorUsage();
    expect(body.usage).toMatchObject({ prompt_tokens: v.promptTokenCount, completion_tokens: 4 });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v));
    await balanceEqualsLedger(t.tenantId);
  });

  it('streamed: cached tokens (part of the prompt) billed at the cache price', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'gemini/cached',
      messages: [{ role: 'user', content: 'A long shared prefix to be cached here' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const chunks = sseChunks(await res.text());
    expect(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('')).toBe('Hello world foo bar baz qux');
    const v = vendorUsage();
    expect(v.cachedContentTokenCount).toBe(Math.floor(v.promptTokenCount! / 2));
    expect(chunks.find((c) => c.usage)?.usage).toMatchObject({
      prompt_tokens: v.promptTokenCount,
      completion_tokens: 6,
      prompt_tokens_details: { cached_tokens: v.cachedContentTokenCount },
    });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v));
    expect(row).toMatchObject({ input_tokens: v.promptTokenCount, cached_tokens: v.cachedContentTokenCount, output_tokens: 6 });
    await balanceEqualsLedger(t.tenantId);
  });

  it('streamed, thinking: a thinkingBudget sent, thoughts relayed as reasoning, thoughtsTokenCount billed as output and recorded as reasoning', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'gemini/thinking',
      messages: [{ role: 'user', content: 'Think, then say hello' }],
      max_tokens: 3000,
      reasoning: { max_tokens: 1024 },
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const chunks = sseChunks(await res.text());
    expect(chunks.map((c) => c.choices?.[0]?.delta?.reasoning ?? '').join('')).toBe('Let me think');
    expect(gemini.stats.lastBody).toMatchObject({
      generationConfig: { maxOutputTokens: 3000, thinkingConfig: { thinkingBudget: 1024, includeThoughts: true } },
    });
    const v = vendorUsage();
    expect([v.candidatesTokenCount, v.thoughtsTokenCount]).toEqual([6, 3]);
    expect(chunks.find((c) => c.usage)?.usage).toMatchObject({
      prompt_tokens: v.promptTokenCount,
      completion_tokens: 9,
      completion_tokens_details: { reasoning_tokens: 3 },
    });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v));
    expect(row).toMatchObject({ output_tokens: 9, reasoning_tokens: 3 });
    await balanceEqualsLedger(t.tenantId);
  });

  it('tools: a functionCall relayed as a tool call; its result goes back as a functionResponse named after the call', async () => {
    const t = await stack.tenant('1.00');
    const tools = [
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    const res = await chat(t.key, { model: 'gemini/tools', messages: [{ role: 'user', content: 'Weather in São Paulo?' }], tools, tool_choice: 'auto' });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.choices[0].finish_reason).toBe('tool_calls');
    expect(body.choices[0].message.tool_calls).toEqual([
      { id: 'call_0', type: 'function', function: { name: MOCK_TOOL_CALL.name, arguments: MOCK_TOOL_CALL.arguments } },
    ]);
    expect(gemini.stats.lastBody).toMatchObject({
      tools: [{ functionDeclarations: [{ name: 'get_weather', description: 'Weather now', parameters: tools[0]!.function.parameters }] }],
      toolConfig: { functionCallingConfig: { mode: 'AUTO' } },
    });
    expect(BigInt((await debit(res.headers.get('x-request-id')!)).amount_micros)).toBe(micros(vendorUsage()));
    const back = await chat(t.key, {
      model: 'gemini/flash',
      tools,
      max_tokens: 2,
      messages: [
        { role: 'user', content: 'Weather in São Paulo?' },
        { role: 'assistant', content: null, tool_calls: body.choices[0].message.tool_calls },
        { role: 'tool', tool_call_id: 'call_0', content: '{"temp_c":24}' },
      ],
    });
    expect(back.status).toBe(200);
    await back.text();
    expect((gemini.stats.lastBody as { contents: unknown }).contents).toEqual([
      { role: 'user', parts: [{ text: 'Weather in São Paulo?' }] },
      { role: 'model', parts: [{ functionCall: { name: MOCK_TOOL_CALL.name, args: JSON.parse(MOCK_TOOL_CALL.arguments) } }] },
      { role: 'user', parts: [{ functionResponse: { name: MOCK_TOOL_CALL.name, response: { temp_c: 24 } } }] },
    ]);
    expect(BigInt((await debit(back.headers.get('x-request-id')!)).amount_micros)).toBe(micros(vendorUsage()));
    await balanceEqualsLedger(t.tenantId);
  });

  it('a wrong key (Google: 400 INVALID_ARGUMENT, API_KEY_INVALID) → 502 upstream_auth_failed, nothing billed', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, { model: 'gemini/wrong-key', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toMatchObject({ code: 'upstream_auth_failed' });
    await stack.waitNoHolds(t.tenantId);
    const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(BigInt(rows[0].balance_micros)).toBe(1_000_000n);
  });

  it('429 RESOURCE_EXHAUSTED fails over to the next deployment and cools down; billed once', async () => {
    const t = await stack.tenant('1.00');
    const before = gemini.stats.byModel['mock-429'] ?? 0;
    // the primary first (its weight 1000 against 1 still leaves a weighted random order a 1-in-1001 chance otherwise)
    const provider = { order: ['primary', 'second-project'] };
    const res = await chat(t.key, { model: 'gemini/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, provider });
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toBe('Hello world foo');
    expect(gemini.stats.byModel['mock-429']).toBe(before + 1);
    expect(BigInt((await debit(res.headers.get('x-request-id')!)).amount_micros)).toBe(micros(vendorUsage()));
    const again = await chat(t.key, { model: 'gemini/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, provider });
    expect(again.status).toBe(200);
    await again.text();
    expect(gemini.stats.byModel['mock-429']).toBe(before + 1);
    await stack.waitSettled([again.headers.get('x-request-id')!]);
    await balanceEqualsLedger(t.tenantId);
  });
});

describe('Vertex AI (a service account)', () => {
  it('`model set --protocol gemini --vertex-project P --region R`: a token minted with a signed JWT and reused while valid', async () => {
    const set = await cli([
      'model',
      'set',
      '--id',
      'vertex/flash',
      '--pool',
      'openai',
      '--protocol',
      'gemini',
      '--vertex-project',
      PROJECT,
      '--region',
      REGION,
      '--base-url',
      gemini.url,
      '--upstream-model',
      'gemini-2.5-flash',
      '--api-key-env',
      'VERTEX_SA_FILE',
      '--input-price',
      '1.50',
      '--output-price',
      '12',
      '--cached-input-price',
      '0.375',
      '--context-length',
      '1000000',
    ]);
    expect(set.code).toBe(0);
    const { rows } = await stack.db.query("select base_url from models where id = 'vertex/flash'", []);
    expect(rows[0].base_url).toBe(`${gemini.url}/v1/projects/${PROJECT}/locations/${REGION}/publishers/google`);
    const t = await stack.tenant('1.00');
    const minted = gemini.stats.tokensMinted;
    const first = await chat(t.key, { model: 'vertex/flash', messages: [{ role: 'user', content: 'Olá' }], max_tokens: 3, stream: true });
    expect(first.status).toBe(200);
    expect(
      sseChunks(await first.text())
        .map((c) => c.choices?.[0]?.delta?.content ?? '')
        .join(''),
    ).toBe('Hello world foo');
    expect(gemini.stats.lastAuth).toBe('vertex');
    expect(gemini.stats.lastPath).toBe(`/v1/projects/${PROJECT}/locations/${REGION}/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse`);
    expect(gemini.stats.tokensMinted).toBe(minted + 1);
    expect(BigInt((await debit(first.headers.get('x-request-id')!)).amount_micros)).toBe(micros(vendorUsage()));
    const second = await chat(t.key, { model: 'vertex/flash', messages: [{ role: 'user', content: 'Olá' }], max_tokens: 3 });
    expect(second.status).toBe(200);
    await second.text();
    expect(gemini.stats.tokensMinted).toBe(minted + 1); // the token is reused while it is valid
    await balanceEqualsLedger(t.tenantId);
  });

  it('a service account whose key Google does not know: the token endpoint refuses the JWT → 502 upstream_auth_failed, nothing billed', async () => {
    await upsertModel(stack.db, {
      id: 'vertex/other',
      pool: 'openai',
      protocol: 'gemini',
      upstream_model: 'gemini-2.5-flash',
      base_url: `${gemini.url}/v1/projects/${PROJECT}/locations/${REGION}/publishers/google`,
      api_key_env: 'VERTEX_OTHER_SA_FILE',
      input_price: IN,
      output_price: OUT,
      context_length: 1_000_000,
    });
    const t = await stack.tenant('1.00');
    const refusals = gemini.stats.tokenRefusals.length;
    const res = await chat(t.key, { model: 'vertex/other', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toMatchObject({ code: 'upstream_auth_failed' });
    expect(gemini.stats.tokenRefusals.slice(refusals)).toEqual(['Invalid JWT Signature.']);
    await stack.waitNoHolds(t.tenantId);
    const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(BigInt(rows[0].balance_micros)).toBe(1_000_000n);
  });
});
