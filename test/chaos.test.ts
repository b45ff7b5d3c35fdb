import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startStack, stopProcess, type TestStack } from './helpers/stack.ts';
import { upsertModel } from '../src/db/models.ts';
import { encode, type UsageMessage } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';

// Exactly-once settlement through crashes, with real processes killed by SIGKILL. Every test
// ends with `catraca ledger check` (balance = credits − debits, holds = open holds, one debit per
// request, nothing negative).
const run = promisify(execFile);
const TOKEN = 1000n; // chaos/unit: input free, R$ 0,001 per output token

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    gateways: 2,
    workers: 1,
    env: { STREAM_IDLE_TIMEOUT_MS: '3000', REQUEST_TIMEOUT_MS: '8000', HOLD_GRACE_MS: '500', KEEPALIVE_MS: '500', METERING_ACK_WAIT_MS: '2000' },
  });
  await upsertModel(stack.db, {
    id: 'chaos/unit',
    pool: 'sim',
    upstream_model: 'echo',
    input_price: 0n,
    output_price: 1_000_000_000n,
    max_output_tokens: 1000,
  });
  await upsertModel(stack.db, {
    id: 'chaos/lorem',
    pool: 'sim',
    upstream_model: 'lorem',
    input_price: 0n,
    output_price: 1_000_000_000n,
    max_output_tokens: 1000,
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

async function ledgerCheck(): Promise<{ ok: boolean; mismatches: unknown[] }> {
  const { stdout } = await run(process.execPath, ['bin/catraca.js', 'ledger', 'check', '--json'], {
    env: { ...process.env, DATABASE_URL: stack.databaseUrl, NATS_URL: stack.natsUrl },
  }).catch((err) => err);
  return JSON.parse(stdout);
}

const post = (base: string, key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${base}/chat/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'chaos/unit', messages: [{ role: 'user', content: 'a b c' }], ...body }),
  });

async function tenantState(tenantId: string) {
  const { rows } = await stack.db.query(
    `select t.balance_micros, t.held_micros,
            (select count(*)::int from holds h where h.tenant_id = t.id) as holds,
            (select count(*)::int from ledger l where l.tenant_id = t.id and l.kind = 'debit') as debits,
            (select coalesce(sum(amount_micros), 0)::bigint from ledger l where l.tenant_id = t.id and l.kind = 'debit') as debited
       from tenants t where t.id = $1`,
    [tenantId],
  );
  return rows[0];
}

describe('exactly-once settlement through crashes', () => {
  it('metering killed mid-batch and restarted settles every request once', async () => {
    const t = await stack.tenant('10.00');
    await stopProcess(stack.metering[0], 'SIGKILL');
    const N = 300;
    const ids: string[] = [];
    for (let i = 0; i < N; i += 30) {
      const batch = await Promise.all(Array.from({ length: 30 }, () => post(stack.urlOf(stack.gateways[i % 2]), t.key, { max_tokens: 5 })));
      for (const r of batch) {
        expect(r.status).toBe(200);
        ids.push(r.headers.get('x-request-id')!);
        await r.text();
      }
    }
    // usage is waiting in JetStream; start metering and kill it while it settles
    const m = await stack.spawnMetering({ METERING_BATCH: '16' });
    const deadline = Date.now() + 10000;
    while ((await tenantState(t.tenantId)).debits < 20 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    await stopProcess(m, 'SIGKILL');
    const mid = (await tenantState(t.tenantId)).debits;
    expect(mid).toBeGreaterThan(0);
    await stack.spawnMetering();
    await stack.waitSettled(ids, 20000);
    const state = await tenantState(t.tenantId);
    expect(state.debits).toBe(N);
    expect(state.debited).toBe(BigInt(N) * 3n * TOKEN); // "a b c" echoed: 3 tokens each
    expect(state.balance_micros).toBe(10_000_000n - BigInt(N) * 3n * TOKEN);
    expect(state.held_micros).toBe(0n);
    expect((await ledgerCheck()).ok).toBe(true);
  }, 90000);

  it('a worker batch message settles each request once: the batch again, one of its requests alone again, and an unknown tenant among them debit nothing more', async () => {
    const t = await stack.tenant('1.00');
    const base = {
      v: 1 as const,
      tenant_id: t.tenantId,
      key_id: t.keyId,
      model: 'chaos/unit',
      pool: 'sim',
      input_price: '0',
      output_price: '1000000000',
      prompt_tokens: 4,
      estimated: false,
      outcome: 'completed' as const,
      ended_at: Date.now(),
      worker: 'test',
    };
    const ids = [1, 2, 3].map((n) => `gen-batch-${Date.now()}-${n}`);
    const items: UsageMessage[] = ids.map((request_id, i) => ({ ...base, request_id, completion_tokens: i + 1 }));
    const stranger = { ...base, request_id: `gen-batch-${Date.now()}-x`, tenant_id: 'ten_nobody', completion_tokens: 50 };
    const js = stack.nc.jetstream();
    const batch = (id: string, list: UsageMessage[]) => encode({ v: 2, batch: id, items: list });
    await js.publish(subjects.usage('sim'), batch(`b-${ids[0]}`, [...items, stranger]), { msgID: `b-${ids[0]}` });
    await stack.waitSettled(ids);
    await js.publish(subjects.usage('sim'), batch(`b2-${ids[0]}`, items), { msgID: `b2-${ids[0]}` });
    await js.publish(subjects.usage('sim'), encode(items[1]), { msgID: items[1].request_id });
    await new Promise((r) => setTimeout(r, 800));
    const state = await tenantState(t.tenantId);
    expect(state.debits).toBe(3);
    expect(state.balance_micros).toBe(1_000_000n - (1n + 2n + 3n) * TOKEN);
    const { rows } = await stack.db.query('select count(*)::int as n from ledger where request_id = $1', [stranger.request_id]);
    expect(rows[0].n).toBe(0);
    expect((await ledgerCheck()).ok).toBe(true);
  });

  it('a usage message published twice (and once more without msgID) debits once', async () => {
    const t = await stack.tenant('1.00');
    const requestId = `gen-dup-${Date.now()}`;
    const usage: UsageMessage = {
      v: 1,
      request_id: requestId,
      tenant_id: t.tenantId,
      key_id: t.keyId,
      model: 'chaos/unit',
      pool: 'sim',
      input_price: '0',
      output_price: '1000000000',
      prompt_tokens: 10,
      completion_tokens: 7,
      estimated: false,
      outcome: 'completed',
      ended_at: Date.now(),
      worker: 'test',
    };
    const js = stack.nc.jetstream();
    const first = await js.publish(subjects.usage('sim'), encode(usage), { msgID: requestId });
    const second = await js.publish(subjects.usage('sim'), encode(usage), { msgID: requestId });
    expect(first.duplicate).toBe(false);
    expect(second.duplicate).toBe(true);
    await js.publish(subjects.usage('sim'), encode(usage)); // past JetStream's window: the ledger's unique key
    await stack.waitSettled([requestId]);
    await new Promise((r) => setTimeout(r, 500));
    const state = await tenantState(t.tenantId);
    expect(state.debits).toBe(1);
    expect(state.balance_micros).toBe(1_000_000n - 7n * TOKEN);
    expect((await ledgerCheck()).ok).toBe(true);
  });

  it('a front door killed mid-stream: the worker still finishes and the request is billed once', async () => {
    const t = await stack.tenant('1.00');
    const victim = await stack.spawnGateway();
    const res = await post(stack.urlOf(victim), t.key, { model: 'chaos/lorem', stream: true, max_tokens: 40, sim: { tokens_per_second: 40 } });
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    await reader.read();
    await stopProcess(victim, 'SIGKILL');
    stack.gateways.splice(stack.gateways.indexOf(victim), 1);
    await reader.read().catch(() => undefined);
    await stack.waitSettled([requestId], 10000);
    const { rows } = await stack.db.query('select outcome, output_tokens, amount_micros from ledger where request_id = $1', [requestId]);
    expect(rows[0]).toEqual({ outcome: 'completed', output_tokens: 40, amount_micros: 40n * TOKEN });
    await stack.waitNoHolds(t.tenantId);
    expect((await tenantState(t.tenantId)).balance_micros).toBe(1_000_000n - 40n * TOKEN);
    expect((await ledgerCheck()).ok).toBe(true);
  });

  it('a worker killed mid-stream: the client gets an error event with finish_reason "error" and the hold is released', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(stack.baseUrl, t.key, { model: 'chaos/lorem', stream: true, max_tokens: 200, sim: { tokens_per_second: 20 } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('"content":"')) text += new TextDecoder().decode((await reader.read()).value);
    for (const w of [...stack.workers]) await stopProcess(w, 'SIGKILL');
    stack.workers.length = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events[events.length - 1]).toBe('data: [DONE]');
    const last = JSON.parse(events[events.length - 2].slice(6));
    expect(last.choices[0].finish_reason).toBe('error');
    expect(last.error.status).toBe(504);
    // the worker never published usage: the sweeper releases the hold after its deadline
    await stack.waitNoHolds(t.tenantId, 15000);
    const state = await tenantState(t.tenantId);
    expect(state).toMatchObject({ balance_micros: 1_000_000n, held_micros: 0n, debits: 0 });
    await stack.spawnWorker();
    expect((await post(stack.baseUrl, t.key, { max_tokens: 3 })).status).toBe(200);
    expect((await ledgerCheck()).ok).toBe(true);
  }, 40000);

  it('NATS restarted while streams are in flight: processes reconnect, nothing is double-billed, the ledger reconciles', async () => {
    const t = await stack.tenant('5.00');
    const controllers = Array.from({ length: 8 }, () => new AbortController());
    const responses = await Promise.all(
      controllers.map((c, i) =>
        post(stack.urlOf(stack.gateways[i % 2]), t.key, { model: 'chaos/lorem', stream: true, max_tokens: 60, sim: { tokens_per_second: 30 } }, c.signal),
      ),
    );
    const ids = responses.map((r) => r.headers.get('x-request-id')!);
    const drained = responses.map((r) => r.text().catch(() => ''));
    await new Promise((r) => setTimeout(r, 300));
    await stack.restartNats(1000);
    await Promise.all(drained);
    // after the restart, new requests flow again through both front doors
    const deadline = Date.now() + 15000;
    let after: Response | undefined;
    while (Date.now() < deadline) {
      after = await post(stack.baseUrl, t.key, { max_tokens: 2 }).catch(() => undefined);
      if (after?.status === 200) break;
      await after?.text();
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(after?.status).toBe(200);
    ids.push(after!.headers.get('x-request-id')!);
    // every request either settled once or had its hold released; never twice
    const settleDeadline = Date.now() + 20000;
    let state = await tenantState(t.tenantId);
    while (state.holds > 0 && Date.now() < settleDeadline) {
      await new Promise((r) => setTimeout(r, 200));
      state = await tenantState(t.tenantId);
    }
    expect(state.holds).toBe(0);
    expect(state.held_micros).toBe(0n);
    const { rows } = await stack.db.query('select request_id, count(*)::int as n from ledger where request_id = any($1) group by request_id', [ids]);
    for (const row of rows) expect(row.n).toBe(1);
    expect(state.balance_micros).toBe(5_000_000n - state.debited);
    expect((await ledgerCheck()).ok).toBe(true);
  }, 60000);
});
