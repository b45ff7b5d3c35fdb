import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { startStack, stopProcess, SIM_PRICES, type TestStack } from './helpers/stack.ts';
import { costMicros } from '../src/billing/money.ts';
import { upsertModel } from '../src/db/models.ts';

// Front doors that serve the `sim` pool in their own process (GATEWAY_LOCAL_POOLS): no worker
// process at all unless a test spawns one. The money guarantees of the NATS path hold on this
// one: exact debits, strict prepaid across doors, cancel billing, drain on SIGTERM, overflow to
// worker processes when the lane is full, and a killed door's holds swept.
const run = promisify(execFile);
const TOKEN = 1000n; // local/unit: input free, R$ 0,001 per output token
const LOCAL = { GATEWAY_LOCAL_POOLS: 'sim' };

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    gateways: 2,
    workers: 0,
    env: { STREAM_IDLE_TIMEOUT_MS: '3000', REQUEST_TIMEOUT_MS: '8000', HOLD_GRACE_MS: '500', KEEPALIVE_MS: '500' },
  });
  // the stack's own doors were started without the lane: replace them
  for (const g of [...stack.gateways]) await stopProcess(g);
  stack.gateways.length = 0;
  await stack.spawnGateway(LOCAL);
  await stack.spawnGateway(LOCAL);
  await upsertModel(stack.db, { id: 'local/unit', pool: 'sim', upstream_model: 'echo', input_price: 0n, output_price: 1_000_000_000n, max_output_tokens: 100 });
  await upsertModel(stack.db, {
    id: 'local/lorem',
    pool: 'sim',
    upstream_model: 'lorem',
    input_price: 0n,
    output_price: 1_000_000_000n,
    max_output_tokens: 1000,
  });
}, 90000);

afterAll(async () => {
  await stack?.stop();
});

const post = (base: string, key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${base}/chat/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'local/unit', messages: [{ role: 'user', content: 'ping' }], ...body }),
  });

async function tenantState(tenantId: string) {
  const { rows } = await stack.db.query(
    `select t.balance_micros, t.held_micros,
            (select count(*)::int from ledger l where l.tenant_id = t.id and l.kind = 'debit') as debits
       from tenants t where t.id = $1`,
    [tenantId],
  );
  return rows[0];
}

async function ledgerCheck(): Promise<{ ok: boolean }> {
  const { stdout } = await run(process.execPath, ['bin/catraca.js', 'ledger', 'check', '--json'], {
    env: { ...process.env, DATABASE_URL: stack.databaseUrl, NATS_URL: stack.natsUrl },
  }).catch((err) => err);
  return JSON.parse(stdout);
}

const dataEvents = (text: string) => text.split('\n\n').filter((e) => e.startsWith('data: '));

describe('pools served inside the front door (GATEWAY_LOCAL_POOLS)', () => {
  it('streams through the openai client with no worker process and debits the exact cost', async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const messages = [{ role: 'user' as const, content: 'one two three four' }];
    const stream = await client.chat.completions.create({ model: 'sim/echo', stream: true, stream_options: { include_usage: true }, messages });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null | undefined;
    let id = '';
    for await (const chunk of stream) {
      id = chunk.id;
      text += chunk.choices[0]?.delta?.content ?? '';
      finish ??= chunk.choices[0]?.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('one two three four');
    expect(finish).toBe('stop');
    // sim: prompt = 3 + (3 + 4), completion = 4 tokens
    expect(usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 4, total_tokens: 14 });
    await stack.waitSettled([id]);
    const cost = costMicros(10, 4, SIM_PRICES.echo);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n - cost, held_micros: 0n, debits: 1 });
  });

  it('100 concurrent requests through two doors on R$ 1,00 at R$ 0,10 worst case: exactly 10 admitted, each debited once', { timeout: 60000 }, async () => {
    const t = await stack.tenant('1.00');
    const slow = { max_tokens: 100, sim: { first_token_ms: 4000 } };
    const responses = await Promise.all(Array.from({ length: 100 }, (_, i) => post(stack.urlOf(stack.gateways[i % 2]), t.key, slow)));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 402)).toHaveLength(90);
    await Promise.all(responses.map((r) => r.text()));
    await stack.waitSettled(responses.filter((r) => r.status === 200).map((r) => r.headers.get('x-request-id')!));
    await stack.waitNoHolds(t.tenantId);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n - 10n * TOKEN, held_micros: 0n, debits: 10 });
  });

  it('a client that leaves mid-stream cancels generation in the door and is billed only what was generated', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const res = await post(stack.baseUrl, t.key, { model: 'local/lorem', stream: true, max_tokens: 400, sim: { tokens_per_second: 50 } }, controller.signal);
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"content":"[^"]/g) ?? []).length < 5) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await stack.waitSettled([requestId]);
    const { rows } = await stack.db.query('select output_tokens, outcome, amount_micros from ledger where request_id = $1', [requestId]);
    expect(rows[0].outcome).toBe('cancelled');
    expect(rows[0].output_tokens).toBeGreaterThanOrEqual(5);
    expect(rows[0].output_tokens).toBeLessThan(15);
    expect(rows[0].amount_micros).toBe(BigInt(rows[0].output_tokens) * TOKEN);
    await stack.waitNoHolds(t.tenantId);
    expect((await ledgerCheck()).ok).toBe(true);
  });

  it('a full lane: with no worker process a job waits for a slot of the lane; with one it goes there at once', { timeout: 60000 }, async () => {
    const t = await stack.tenant('1.00');
    const door = await stack.spawnGateway({ ...LOCAL, GATEWAY_LOCAL_CONCURRENCY: '1' });
    const url = stack.urlOf(door);
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const started = Date.now();
    const first = post(url, t.key, { max_tokens: 5, sim: { first_token_ms: 1500 } });
    await sleep(300);
    const waited = await post(url, t.key, { max_tokens: 5 });
    expect(waited.status).toBe(200);
    expect((await waited.json()).choices[0].message.content).toBe('ping');
    expect(Date.now() - started).toBeGreaterThanOrEqual(1500); // it ran after the first freed the slot
    expect((await first).status).toBe(200);

    const worker = await stack.spawnWorker({ WORKER_POOLS: 'sim' });
    const slow = post(url, t.key, { max_tokens: 5, sim: { first_token_ms: 3000 } });
    await sleep(300);
    const t0 = Date.now();
    const overflow = await post(url, t.key, { max_tokens: 5 });
    expect(overflow.status).toBe(200);
    expect(Date.now() - t0).toBeLessThan(2500); // not after the slow one: the worker process took it
    expect((await slow).status).toBe(200);
    await stack.waitNoHolds(t.tenantId);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n - 4n * TOKEN, held_micros: 0n, debits: 4 });
    await stopProcess(worker);
    stack.workers.splice(stack.workers.indexOf(worker), 1);
    await stopProcess(door);
    stack.gateways.splice(stack.gateways.indexOf(door), 1);
  });

  it('a door on SIGTERM finishes its in-process stream, settles it and exits 0', async () => {
    const t = await stack.tenant('1.00');
    const door = await stack.spawnGateway(LOCAL);
    const res = await post(stack.urlOf(door), t.key, { model: 'local/lorem', stream: true, max_tokens: 20, sim: { tokens_per_second: 20 } });
    expect(res.status).toBe(200);
    const body = res.text();
    await new Promise((r) => setTimeout(r, 200));
    door.child.kill('SIGTERM');
    const events = dataEvents(await body);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    expect(JSON.parse(events[events.length - 2].slice(6)).choices[0].finish_reason).toBe('length');
    expect(await door.exited).toBe(0);
    stack.gateways.splice(stack.gateways.indexOf(door), 1);
    await stack.waitSettled([res.headers.get('x-request-id')!]);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n - 20n * TOKEN, held_micros: 0n, debits: 1 });
  });

  it('NATS away for 1.5 s mid-stream: the in-process stream carries on (no frame crosses NATS), its usage settles once when NATS is back', {
    timeout: 40000,
  }, async () => {
    const t = await stack.tenant('1.00');
    const res = await post(stack.baseUrl, t.key, { model: 'local/lorem', stream: true, max_tokens: 60, sim: { tokens_per_second: 20 } });
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id')!;
    const body = res.text();
    await new Promise((r) => setTimeout(r, 300));
    await stack.restartNats(1500);
    const events = dataEvents(await body);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const last = JSON.parse(events[events.length - 2].slice(6));
    expect(last.choices[0].finish_reason).toBe('length');
    await stack.waitSettled([requestId], 20000);
    await stack.waitNoHolds(t.tenantId, 20000);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n - 60n * TOKEN, held_micros: 0n, debits: 1 });
    expect((await ledgerCheck()).ok).toBe(true);
  });

  it('a door killed mid-stream loses its in-process jobs: nothing is debited, the hold is swept, the ledger reconciles', { timeout: 40000 }, async () => {
    const t = await stack.tenant('1.00');
    const door = await stack.spawnGateway(LOCAL);
    const res = await post(stack.urlOf(door), t.key, { model: 'local/lorem', stream: true, max_tokens: 200, sim: { tokens_per_second: 20 } });
    const reader = res.body!.getReader();
    await reader.read();
    await stopProcess(door, 'SIGKILL');
    stack.gateways.splice(stack.gateways.indexOf(door), 1);
    await reader.read().catch(() => undefined);
    // the usage died with the door (as with a worker killed before it published usage)
    await stack.waitNoHolds(t.tenantId, 20000);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 1_000_000n, held_micros: 0n, debits: 0 });
    expect((await ledgerCheck()).ok).toBe(true);
  });
});
