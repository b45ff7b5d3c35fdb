import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';

// A front door that gave up waiting for a worker's ack answered 504 before any byte of an answer:
// the client was told its request failed. A worker that takes the job afterwards (it was stalled:
// an overloaded machine, here SIGSTOP past the door's 5 s ack timeout) must not run it at the
// vendor, and the request must not be debited; its hold goes back.
const run = promisify(execFile);

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ gateways: 1, workers: 1 });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

async function ledgerCheck(tenantId: string): Promise<{ ok: boolean }> {
  const { stdout } = await run(process.execPath, ['bin/catraca.js', 'ledger', 'check', '--tenant', tenantId, '--json'], {
    env: { ...process.env, DATABASE_URL: stack.databaseUrl, NATS_URL: stack.natsUrl },
  }).catch((err) => err);
  return JSON.parse(stdout);
}

async function tenantState(tenantId: string) {
  const { rows } = await stack.db.query(
    `select t.balance_micros::text as balance, t.held_micros::text as held,
            (select count(*)::int from holds h where h.tenant_id = t.id) as holds,
            (select count(*)::int from ledger l where l.tenant_id = t.id and l.kind = 'debit') as debits
       from tenants t where t.id = $1`,
    [tenantId],
  );
  return rows[0];
}

const post = (key: string) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim/echo', messages: [{ role: 'user', content: 'a b c' }], max_tokens: 5 }),
  });

describe('a job whose front door stopped waiting for its ack', () => {
  it('is never run nor debited when its worker takes it late, and its hold goes back', async () => {
    const t = await stack.tenant('10.00');
    const worker = stack.workers[0].child;
    worker.kill('SIGSTOP');
    let res: Response;
    try {
      res = await post(t.key);
      expect(res.status).toBe(504);
      expect(await res.json()).toEqual({
        error: { message: 'No worker acknowledged the request in time.', type: 'timeout_error', param: null, code: 'upstream_timeout' },
      });
    } finally {
      worker.kill('SIGCONT');
    }
    const requestId = res.headers.get('x-request-id')!;
    expect(requestId).toMatch(/^gen-/);

    // The worker reads the job it was sent while stopped; it refuses it, and the door gives the hold back.
    await stack.waitNoHolds(t.tenantId, 10000);
    // what a debit would have needed: the worker's usage through JetStream to metering
    await new Promise((r) => setTimeout(r, 2000));
    const { rows } = await stack.db.query('select kind, amount_micros::text from ledger where request_id = $1', [requestId]);
    expect(rows).toEqual([]);
    expect(await tenantState(t.tenantId)).toEqual({ balance: '10000000', held: '0', holds: 0, debits: 0 });
    expect(stack.allLogLines().some((l) => l.includes(requestId) && l.includes('after its front door stopped waiting'))).toBe(true);

    // the worker serves the next request as usual, debited exactly: 3 prompt + 3 output tokens of sim/echo (R$ 1 / R$ 2 per 1M)
    const ok = await post(t.key);
    expect(ok.status).toBe(200);
    const body = (await ok.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    const cost = BigInt(body.usage.prompt_tokens) * 1n + BigInt(body.usage.completion_tokens) * 2n;
    await stack.waitSettled([ok.headers.get('x-request-id')!]);
    await stack.waitNoHolds(t.tenantId);
    expect(await tenantState(t.tenantId)).toEqual({ balance: String(10_000_000n - cost), held: '0', holds: 0, debits: 1 });
    expect(await ledgerCheck(t.tenantId)).toMatchObject({ ok: true });
  }, 60000);
});
