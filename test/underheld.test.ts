import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MockUpstream, startMockUpstream } from '../bench/mock-upstream/server.ts';
import { upsertModel } from '../src/db/models.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// A request must never be held for less than the vendor can bill (issue: hardening, item 5):
// a model registered without a context length is not capped at the default 128 000 tokens, and a
// settlement that could not debit in full (something was held too little) raises an alert and
// suspends the tenant's admission until an operator reactivates it.
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
let stack: TestStack;
let mock: MockUpstream;

beforeAll(async () => {
  mock = await startMockUpstream({ host: '127.0.0.1', port: 0, outputTokens: 2 });
  stack = await startStack({
    gateways: 2,
    workers: 1,
    pools: 'openai,anthropic',
    // METRICS_PORT 0: each process's /metrics on a free port (metering's counts shortfalls)
    env: { MOCK_UPSTREAM_KEY: 'sk-upstream-underheld-0123456789', WORKER_UPSTREAM_KEYS: 'MOCK_UPSTREAM_KEY', METRICS_PORT: '0' },
  });
  const common = { pool: 'openai', upstream_model: 'gpt-4o-mini', base_url: mock.url, api_key_env: 'MOCK_UPSTREAM_KEY', output_price: 1_000_000n };
  // no context length given: the default 128 000 is not a bound on what the vendor bills
  await upsertModel(stack.db, { id: 'long/unset', input_price: 1_000_000n, ...common });
  // the same, spoken natively on /v1/messages (an Anthropic-protocol vendor)
  await upsertModel(stack.db, {
    id: 'longclaude/unset',
    pool: 'anthropic',
    upstream_model: 'mock-claude',
    base_url: mock.url,
    api_key_env: 'MOCK_UPSTREAM_KEY',
    input_price: 1_000_000n,
    output_price: 1_000_000n,
  });
  // an image bound far below what the vendor bills for one image (25 501 tokens): an operator's mistake
  await upsertModel(stack.db, {
    id: 'vision/wrong',
    input_price: 1_000_000n,
    input_modalities: ['text', 'image'],
    image_input_tokens: 10,
    context_length: 128_000,
    ...common,
  });
}, 60_000);

afterAll(async () => {
  await stack?.stop();
  await mock?.close();
});

const post = (key: string, body: Record<string, unknown>, door = 0) =>
  fetch(`${stack.urlOf(stack.gateways[door])}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('a model without a context length', () => {
  it('holds what the body can carry, not the default context: 1.5 MB of prompt on R$ 1,00 is refused (402), nothing held', async () => {
    const t = await stack.tenant('1.00');
    const before = mock.stats.requests;
    // 1.5 million bytes at R$ 1 per 1M tokens: up to R$ 1,50 of input; capped at 128 000 it would be R$ 0,128
    const res = await post(t.key, { model: 'long/unset', max_tokens: 1, messages: [{ role: 'user', content: 'x '.repeat(750_000) }] });
    expect(res.status).toBe(402);
    expect((await res.json()).error.message).toMatch(/^This request requires more credits: its input alone can cost up to R\$ 1\.50/);
    expect(mock.stats.requests).toBe(before);
    const holds = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [t.tenantId]);
    expect(holds.rows[0].n).toBe(0);
  });
});

describe('a model without a context length, on /v1/messages (Anthropic-protocol vendor)', () => {
  const messages = (key: string, body: Record<string, unknown>) =>
    fetch(`${stack.urlOf(stack.gateways[0])}/messages`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  // 1 500 000 bytes of text: 8 per request + 8 per message + the string's bytes + 2 = 1 500 018 tokens
  // at R$ 1 per 1M (R$ 1,500018); one output token at R$ 1 per 1M: a hold of 1 500 019 µBRL.
  // Capped at the default 128 000 it would have been 128 001 µBRL.
  const body = { model: 'longclaude/unset', max_tokens: 1, messages: [{ role: 'user', content: 'x '.repeat(750_000) }] };
  const holds = async (tenantId: string) => (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n;
  const balance = async (tenantId: string): Promise<bigint> =>
    (await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros;

  it('1.5 MB of prompt on R$ 1,00 is refused (402 billing_error), nothing held, the vendor never asked', async () => {
    const t = await stack.tenant('1.00');
    const before = mock.stats.requests;
    const res = await messages(t.key, body);
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      type: 'error',
      error: {
        type: 'billing_error',
        message: 'This request requires more credits: its input alone can cost up to R$ 1.500018, more than your available balance of R$ 1.000000.',
      },
    });
    expect(mock.stats.requests).toBe(before);
    expect(await holds(t.tenantId)).toBe(0);
    expect(await balance(t.tenantId)).toBe(1_000_000n);
  });

  it('is held in full: 900 000 bytes need R$ 0,900019; one micro-real less is a 402 (nothing held), that much is admitted and debited what the vendor billed', async () => {
    // under NATS's 1 MiB max_payload, so the job can go: 8 + 8 + 900 002 = 900 018 tokens (R$ 0,900018), one output token
    const fits = { ...body, messages: [{ role: 'user', content: 'x '.repeat(450_000) }] };
    const short = await stack.tenant('0.900018');
    const before = mock.stats.requests;
    const refused = await messages(short.key, fits);
    expect(refused.status).toBe(402);
    expect(await refused.json()).toEqual({
      type: 'error',
      error: {
        type: 'billing_error',
        message:
          'This request requires more credits, or fewer max_tokens. You requested up to 1 tokens, but can only afford 0 with your available balance of R$ 0.900018.',
      },
    });
    expect(mock.stats.requests).toBe(before);
    expect(await holds(short.tenantId)).toBe(0);
    expect(await balance(short.tenantId)).toBe(900_018n);
    const t = await stack.tenant('0.900019');
    const res = await messages(t.key, fits);
    expect(res.status).toBe(200);
    const msg = await res.json();
    // the mock bills 3 per request + 3 per message + 450 000 words; one output token
    expect(msg.usage).toMatchObject({ input_tokens: 450_006, output_tokens: 1 });
    await stack.waitSettled([msg.id]);
    const debit = await stack.db.query('select amount_micros from ledger where request_id = $1', [msg.id]);
    expect(debit.rows[0].amount_micros).toBe(450_007n);
    expect(await balance(t.tenantId)).toBe(900_019n - 450_007n);
    expect(await holds(t.tenantId)).toBe(0);
  });
});

describe('a shortfall', () => {
  it('is an alert and suspends the tenant (403 tenant_suspended on every door) until an operator reactivates it', async () => {
    // the image is held at 10 tokens, the vendor bills 25 501: R$ 0,0255 against a balance of R$ 0,01
    const t = await stack.tenant('0.01');
    const image = { type: 'image_url', image_url: { url: 'https://img.example/p.png', detail: 'high' } };
    const res = await post(t.key, { model: 'vision/wrong', max_tokens: 2, messages: [{ role: 'user', content: [image] }] });
    expect(res.status).toBe(200);
    const id = res.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const debit = await stack.db.query('select amount_micros, cost_micros from ledger where request_id = $1', [id]);
    expect(debit.rows[0].amount_micros).toBe(10_000n);
    expect(debit.rows[0].cost_micros).toBeGreaterThan(10_000n);
    const deadline = Date.now() + 5000;
    let tenant: { suspended_at: Date | null; suspended_reason: string | null } = { suspended_at: null, suspended_reason: null };
    while (Date.now() < deadline && !tenant.suspended_at) {
      tenant = (await stack.db.query('select suspended_at, suspended_reason from tenants where id = $1', [t.tenantId])).rows[0];
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(tenant.suspended_reason).toBe(`shortfall: request ${id} cost ${debit.rows[0].cost_micros} µBRL, 10000 debited`);
    expect(stack.allLogLines().some((l) => l.includes('shortfall: cost exceeded available balance; tenant suspended') && l.includes(id))).toBe(true);
    // and counted where an operator's alerting looks: metering's catraca_shortfalls_total
    const meteringPort = JSON.parse(stack.metering[0].lines.find((l) => l.includes('metering consumer running'))!).metrics_port;
    const series = (await (await fetch(`http://127.0.0.1:${meteringPort}/metrics`)).text()).match(/^catraca_shortfalls_total(?:\{[^}]*\})? (\d+)$/m);
    expect(Number(series?.[1])).toBe(1);
    // one statement: other test files check the whole ledger meanwhile
    await stack.db.query(
      `with c as (insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, note)
                  values ($1, 'credit', 5000000, 5000000, 'grant', 'top-up'))
       update tenants set balance_micros = 5000000 where id = $1`,
      [t.tenantId],
    );
    for (const door of [0, 1]) {
      const refused = await post(t.key, { model: 'vision/wrong', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }, door);
      expect(refused.status).toBe(403);
      expect((await refused.json()).error).toMatchObject({ type: 'permission_error', code: 'tenant_suspended' });
    }
    const cli = (args: string[]) =>
      new Promise<{ code: number; stdout: string }>((resolve) =>
        execFile(process.execPath, [join(ROOT, 'bin/catraca.js'), ...args], { cwd: ROOT, env: process.env }, (err, stdout) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout }),
        ),
      );
    const reactivated = await cli(['tenant', 'reactivate', '--id', t.tenantId, '--json']);
    expect(reactivated.code).toBe(0);
    expect(JSON.parse(reactivated.stdout)).toEqual({ id: t.tenantId, reactivated: true, was: tenant.suspended_reason });
    expect((await post(t.key, { model: 'vision/wrong', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] })).status).toBe(200);
  });
});
