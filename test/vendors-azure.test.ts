import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockAzure, startMockAzure } from '../bench/mock-upstream/azure.ts';
import { MOCK_TOOL_CALL } from '../bench/mock-upstream/content.ts';
import { addDeployment, upsertModel } from '../src/db/models.ts';
import { debitOf, expectBalanceEqualsLedger } from './helpers/ledger.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Azure OpenAI as a vendor protocol (src/providers/azure) through the whole stack (front door,
// worker, metering), against a mock resource that checks the api-key header and the path with the
// deployment name and api-version: chat streamed and not, tools, cached and reasoning tokens billed
// to the micro-real, the v1 base URL, and a vendor 429 failed over to another deployment.

const AZURE_KEY = 'azkey0123456789abcdef0123456789ab';
const IN = 2_000_000n; // µBRL per 1M tokens
const OUT = 8_000_000n;
const READ = 500_000n;

let stack: TestStack;
let azure: MockAzure;

beforeAll(async () => {
  azure = await startMockAzure({
    apiKey: AZURE_KEY,
    deployments: { 'gpt4o-br': 'mock-gpt', 'o4-br': 'mock-reasoning', 'tools-br': 'mock-tools', 'busy-br': 'mock-429' },
  });
  stack = await startStack({
    gateways: 1,
    workers: 1,
    env: { AZURE_TEST_KEY: AZURE_KEY, AZURE_WRONG_KEY: 'azkey-not-this-resources', WORKER_UPSTREAM_KEYS: 'AZURE_TEST_KEY,AZURE_WRONG_KEY' },
  });
  const common = {
    pool: 'openai',
    protocol: 'azure' as const,
    api_key_env: 'AZURE_TEST_KEY',
    input_price: IN,
    output_price: OUT,
    cached_input_price: READ,
    context_length: 128_000,
    extra_params: [] as string[],
  };
  await upsertModel(stack.db, { id: 'azure/gpt-4o', upstream_model: 'gpt4o-br', base_url: `${azure.url}?api-version=2024-10-21`, ...common });
  await upsertModel(stack.db, { id: 'azure/o4', upstream_model: 'o4-br', base_url: azure.url, reasoning: true, ...common });
  await upsertModel(stack.db, { id: 'azure/tools', upstream_model: 'tools-br', base_url: `${azure.url}/openai/v1`, ...common });
  // the busy deployment is nearly always tried first (weights 1000 : 1)
  await upsertModel(stack.db, { id: 'azure/failover', upstream_model: 'busy-br', base_url: azure.url, weight: 1000, ...common });
  await addDeployment(stack.db, 'dep_azure_failover_b', {
    model_id: 'azure/failover',
    name: 'second-resource',
    protocol: 'azure',
    base_url: azure.url,
    api_key_env: 'AZURE_TEST_KEY',
    upstream_model: 'gpt4o-br',
  });
  await stack.nc.flush();
  await new Promise((r) => setTimeout(r, 300)); // catalog reload after the writes
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await azure?.close();
});

const chat = (key: string, body: Record<string, unknown>) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** ceil(Σ tokens × price / 1M): docs/billing.md. */
const micros = (input: number, cached: number, output: number) =>
  (BigInt(input - cached) * IN + BigInt(cached) * READ + BigInt(output) * OUT + 999_999n) / 1_000_000n;

const debit = (requestId: string) => debitOf(stack, requestId);

const balanceEqualsLedger = (tenantId: string) => expectBalanceEqualsLedger(stack, tenantId);

const lastUsage = () =>
  azure.openai.stats.usages.filter((u) => u.api === 'chat').at(-1) as { usage: { prompt_tokens: number; completion_tokens: number; cached_tokens: number } };

describe('Azure OpenAI deployments', () => {
  it('not streamed: api-key header, the deployment path with its api-version, cached tokens billed at the cache price', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, { model: 'azure/gpt-4o', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 6, prompt_cache_key: 'k1' });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.choices[0].message.content).toBe('Hello world foo bar baz qux');
    expect(azure.stats.lastPath).toBe('/openai/deployments/gpt4o-br/chat/completions?api-version=2024-10-21');
    expect(azure.stats.lastApiKey).toBe(AZURE_KEY);
    expect(azure.openai.stats.lastAuthorization).toBe(`Bearer ${AZURE_KEY}`); // the relay's own, not the gateway's
    const v = lastUsage().usage;
    expect(v.cached_tokens).toBeGreaterThan(0);
    expect(body.usage).toMatchObject({ prompt_tokens: v.prompt_tokens, completion_tokens: 6, prompt_tokens_details: { cached_tokens: v.cached_tokens } });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v.prompt_tokens, v.cached_tokens, 6));
    expect(row).toMatchObject({ input_tokens: v.prompt_tokens, cached_tokens: v.cached_tokens, output_tokens: 6 });
    await balanceEqualsLedger(t.tenantId);
  });

  it('streamed, a reasoning deployment: reasoning relayed, reasoning tokens recorded, max_completion_tokens sent, default api-version', async () => {
    const t = await stack.tenant('1.00');
    const res = await chat(t.key, {
      model: 'azure/o4',
      messages: [{ role: 'user', content: 'Think, then say hello' }],
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    const chunks = text
      .split('\n\n')
      .map((e) => e.replace(/^data: /, ''))
      .filter((d) => d.startsWith('{'))
      .map((d) => JSON.parse(d));
    expect(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('')).toBe('Hello world foo bar baz');
    expect(chunks.map((c) => c.choices?.[0]?.delta?.reasoning ?? '').join('')).toBe('Let me think');
    expect(azure.stats.lastPath).toBe('/openai/deployments/o4-br/chat/completions?api-version=2024-10-21');
    expect(azure.openai.stats.lastBody).toMatchObject({ max_completion_tokens: 5 });
    const v = lastUsage().usage;
    const usage = chunks.find((c) => c.usage)?.usage;
    expect(v.completion_tokens).toBe(8); // three reasoning tokens and five of the answer
    expect(usage).toMatchObject({ prompt_tokens: v.prompt_tokens, completion_tokens: 8, completion_tokens_details: { reasoning_tokens: 3 } });
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v.prompt_tokens, 0, 8));
    expect(row).toMatchObject({ output_tokens: 8, reasoning_tokens: 3 });
    await balanceEqualsLedger(t.tenantId);
  });

  it('the v1 base URL: the deployment as model, no api-version; a tool call relayed', async () => {
    const t = await stack.tenant('1.00');
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const res = await chat(t.key, { model: 'azure/tools', messages: [{ role: 'user', content: 'Weather in São Paulo?' }], tools });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(azure.stats.lastPath).toBe('/openai/v1/chat/completions');
    expect(body.choices[0].finish_reason).toBe('tool_calls');
    expect(body.choices[0].message.tool_calls).toEqual([
      { id: MOCK_TOOL_CALL.id, type: 'function', function: { name: MOCK_TOOL_CALL.name, arguments: MOCK_TOOL_CALL.arguments } },
    ]);
    const v = lastUsage().usage;
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v.prompt_tokens, 0, v.completion_tokens));
    await balanceEqualsLedger(t.tenantId);
  });

  it('a deployment answering 429 fails over to the next before the first byte; the request is billed once, at the one that served', async () => {
    const t = await stack.tenant('1.00');
    const before = azure.stats.byDeployment['busy-br'] ?? 0;
    const res = await chat(t.key, { model: 'azure/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toBe('Hello world foo');
    expect(azure.stats.byDeployment['busy-br']).toBe(before + 1);
    const v = lastUsage().usage;
    const row = await debit(res.headers.get('x-request-id')!);
    expect(BigInt(row.amount_micros)).toBe(micros(v.prompt_tokens, 0, 3));
    // the busy deployment cools down: the next request goes straight to the second resource
    const again = await chat(t.key, { model: 'azure/failover', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(again.status).toBe(200);
    await again.text();
    expect(azure.stats.byDeployment['busy-br']).toBe(before + 1);
    await balanceEqualsLedger(t.tenantId);
  });

  it.each([
    [
      'a wrong api-key',
      'azure/wrong-key',
      '',
      'AZURE_WRONG_KEY',
      'upstream_auth_failed',
      '/openai/deployments/gpt4o-br/chat/completions?api-version=2024-10-21',
    ],
    [
      'a wrong path',
      'azure/wrong-path',
      '/wrong',
      'AZURE_TEST_KEY',
      'upstream_model_not_found',
      '/wrong/openai/deployments/gpt4o-br/chat/completions?api-version=2024-10-21',
    ],
  ])('%s is the operator’s problem: 502, nothing billed', async (_, id, path, keyEnv, code, seen) => {
    await upsertModel(stack.db, {
      id,
      pool: 'openai',
      protocol: 'azure',
      upstream_model: 'gpt4o-br',
      base_url: `${azure.url}${path}`,
      api_key_env: keyEnv,
      input_price: IN,
      output_price: OUT,
      context_length: 128_000,
    });
    const t = await stack.tenant('1.00');
    const refused = azure.stats.refused;
    const res = await chat(t.key, { model: id, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(res.status).toBe(502);
    expect((await res.json()).error).toMatchObject({ code });
    expect(azure.stats.lastPath).toBe(seen);
    expect(azure.stats.refused).toBe(refused + 1);
    await stack.waitNoHolds(t.tenantId);
    const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(BigInt(rows[0].balance_micros)).toBe(1_000_000n);
  });
});
