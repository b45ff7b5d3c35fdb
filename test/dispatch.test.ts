import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';

// When every worker of a pool is at its limit, a request waits in the front door (bounded, fair
// between tenants) instead of getting 503 at once. One worker that runs ONE job at a time makes
// every wait visible. Keys get a generous request rate limit so that their requests are admitted
// one by one in PostgreSQL (never from a lease): each hold is then a row the test can watch.
let stack: TestStack;
// the waiting jobs' byte budgets: two 120 KB jobs of one tenant fit, a third does not; three in all
const BYTES_TENANT = 300_000;
const BYTES_DOOR = 400_000;

beforeAll(async () => {
  stack = await startStack({
    gateways: 1,
    workers: 1,
    // a stream idle timeout below the wait deadline: waiting for a slot must not count as a quiet stream
    env: {
      WORKER_CONCURRENCY: '1',
      DISPATCH_WAIT_MS: '2500',
      DISPATCH_MAX_WAITING_PER_TENANT: '40',
      DISPATCH_MAX_WAITING_BYTES: String(BYTES_DOOR),
      DISPATCH_MAX_WAITING_BYTES_PER_TENANT: String(BYTES_TENANT),
      STREAM_IDLE_TIMEOUT_MS: '1000',
      KEEPALIVE_MS: '300',
    },
  });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const RATE = { rateLimitRequests: 10_000, rateLimitIntervalS: 60 };
const lorem = (sim: Record<string, number>) => ({ model: 'sim/lorem', max_tokens: 50, messages: [{ role: 'user', content: 'go' }], sim });
const post = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${stack.baseUrl}/chat/completions`, {
    method: 'POST',
    signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
const holdsOf = async (tenantId: string) => (await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId])).rows[0].n as number;
const ledgerRows = async (tenantId: string) =>
  (await stack.db.query(`select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'`, [tenantId])).rows[0].n as number;

async function workerAccepted(): Promise<number> {
  const client = stack.nc.services.client();
  for await (const s of await client.stats('catraca-worker')) {
    const data = s.endpoints![0].data as { counters: Record<string, number> };
    return data.counters.catraca_jobs_accepted_total;
  }
  return NaN;
}

describe('a bounded, fair wait for a worker slot', () => {
  it('a pool at its limit queues requests, then serves them in arrival order as the slot frees', { timeout: 30000 }, async () => {
    const t = await stack.tenant('10.00', RATE);
    const busy = post(t.key, lorem({ first_token_ms: 800, output_tokens: 3 }));
    await new Promise((r) => setTimeout(r, 150));
    const ended: number[] = [];
    const waiting = [0, 1, 2].map(async (i) => {
      await new Promise((r) => setTimeout(r, i * 30)); // arrival order 0, 1, 2
      const res = await post(t.key, lorem({ output_tokens: 2 }));
      expect(res.status).toBe(200);
      expect((await res.json()).choices[0].message.content).toBe('Lorem ipsum');
      ended.push(i);
    });
    await Promise.all(waiting);
    expect((await busy).status).toBe(200);
    expect(ended).toEqual([0, 1, 2]);
    await stack.waitNoHolds(t.tenantId);
    expect(await ledgerRows(t.tenantId)).toBe(4);
  });

  it('a wait longer than the stream idle timeout is still a wait: served, not a 504; billed once', { timeout: 30000 }, async () => {
    const t = await stack.tenant('10.00', RATE);
    const busy = post(t.key, lorem({ first_token_ms: 2250, output_tokens: 2 }));
    await new Promise((r) => setTimeout(r, 150));
    const t0 = Date.now();
    const res = await post(t.key, lorem({ output_tokens: 2 }));
    const waited = Date.now() - t0;
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toBe('Lorem ipsum');
    expect(waited).toBeGreaterThan(2000); // it waited past the idle timeout and a sweep of the routes
    expect((await busy).status).toBe(200);
    await stack.waitNoHolds(t.tenantId);
    expect(await ledgerRows(t.tenantId)).toBe(2);
  });

  it('a waiting request whose client leaves releases its hold at once and never reaches a worker', { timeout: 30000 }, async () => {
    const t = await stack.tenant('10.00', RATE);
    const busy = post(t.key, lorem({ first_token_ms: 1500, output_tokens: 2 }));
    await new Promise((r) => setTimeout(r, 150));
    const accepted = await workerAccepted();
    const ac = new AbortController();
    const leaving = post(t.key, lorem({ output_tokens: 2 }), ac.signal).catch((e) => e);
    await new Promise((r) => setTimeout(r, 300));
    expect(await holdsOf(t.tenantId)).toBe(2); // the running request's and the waiting one's
    ac.abort();
    await leaving;
    await new Promise((r) => setTimeout(r, 200));
    expect(await holdsOf(t.tenantId)).toBe(1); // released while the first still runs
    expect((await busy).status).toBe(200);
    await stack.waitNoHolds(t.tenantId);
    await new Promise((r) => setTimeout(r, 500));
    expect(await workerAccepted()).toBe(accepted); // the worker never saw it
    expect(await ledgerRows(t.tenantId)).toBe(1);
  });

  it("fairness: tenant A's backlog does not delay tenant B's first request by more than one slot turnover", { timeout: 60000 }, async () => {
    const a = await stack.tenant('10.00', RATE);
    const b = await stack.tenant('10.00', RATE);
    const job = lorem({ first_token_ms: 150, output_tokens: 1 }); // ~150 ms per slot turnover
    const started = Date.now();
    const backlog = Array.from({ length: 12 }, () => post(a.key, job).then(async (r) => (await r.json(), r.status)));
    await new Promise((r) => setTimeout(r, 100)); // A's twelve are queued (one runs)
    const t0 = Date.now();
    const res = await post(b.key, job);
    const bWaited = Date.now() - t0;
    expect(res.status).toBe(200);
    await res.json();
    expect(await Promise.all(backlog)).toEqual(Array(12).fill(200));
    const aTotal = Date.now() - started;
    // B waits for the job running now and at most one of A's (round-robin), not for A's backlog
    expect(bWaited).toBeLessThan(3 * 150 + 250);
    expect(aTotal).toBeGreaterThan(12 * 150);
  });

  it('past the wait deadline: 503 overloaded with retry-after, hold released, nothing billed', { timeout: 30000 }, async () => {
    const t = await stack.tenant('10.00', RATE);
    const busy = post(t.key, lorem({ first_token_ms: 4000, output_tokens: 1 }));
    await new Promise((r) => setTimeout(r, 150));
    const t0 = Date.now();
    const res = await post(t.key, lorem({ output_tokens: 1 }));
    expect(res.status).toBe(503);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2400);
    expect(res.headers.get('retry-after')).toBe('1');
    expect((await res.json()).error).toEqual({
      type: 'service_unavailable',
      code: 'overloaded',
      param: null,
      message: 'Every worker of this model is busy and the wait for one ran out; retry shortly.',
    });
    expect(await holdsOf(t.tenantId)).toBe(1); // only the running one
    expect((await busy).status).toBe(200);
    await stack.waitNoHolds(t.tenantId);
    expect(await ledgerRows(t.tenantId)).toBe(1);
  });

  it('past the per-tenant bound a request is refused at once; no hold is left in any path', { timeout: 60000 }, async () => {
    const t = await stack.tenant('10.00', RATE);
    // the slot stays busy long enough for the whole flood to be admitted even on a loaded machine
    const busy = post(t.key, lorem({ first_token_ms: 2400, output_tokens: 1 }));
    await new Promise((r) => setTimeout(r, 150));
    const flood = await Promise.all(Array.from({ length: 60 }, () => post(t.key, lorem({ output_tokens: 1 })).then(async (r) => (await r.text(), r.status))));
    expect(flood.filter((s) => s === 503).length).toBeGreaterThanOrEqual(5); // 40 may wait
    await busy;
    await stack.waitNoHolds(t.tenantId, 20000);
    for (const id of [t.tenantId]) expect(await ledgerCheck(stack.db, { tenantId: id })).toMatchObject({ ok: true });
    expect(await ledgerCheck(stack.db)).toMatchObject({ ok: true });
  });
  it('past the byte budget of a tenant, then of the door, a request is refused at once; nothing held, nothing billed', { timeout: 30000 }, async () => {
    const a = await stack.tenant('10.00', RATE);
    const b = await stack.tenant('10.00', RATE);
    const big = (tag: string) => ({ ...lorem({ output_tokens: 1 }), messages: [{ role: 'user', content: `${tag} ${'a'.repeat(120_000)}` }] });
    const busy = post(a.key, lorem({ first_token_ms: 1500, output_tokens: 1 }));
    await new Promise((r) => setTimeout(r, 150));
    const timed = async (key: string, body: Record<string, unknown>) => {
      const t0 = Date.now();
      const res = await post(key, body);
      return { status: res.status, ms: Date.now() - t0, body: await res.json(), retryAfter: res.headers.get('retry-after') };
    };
    const a1 = timed(a.key, big('a1'));
    const a2 = timed(a.key, big('a2'));
    await new Promise((r) => setTimeout(r, 300)); // both wait: 240 KB of A's 300 KB
    expect(await holdsOf(a.tenantId)).toBe(3);
    const a3 = await timed(a.key, big('a3')); // 360 KB > A's budget
    expect([a3.status, a3.retryAfter, a3.body.error.code]).toEqual([503, '1', 'overloaded']);
    expect(a3.ms).toBeLessThan(1000);
    const b1 = timed(b.key, big('b1')); // 360 KB of the door's 400 KB
    await new Promise((r) => setTimeout(r, 300));
    const b2 = await timed(b.key, big('b2')); // 480 KB > the door's budget (B's own 240 KB would fit)
    expect([b2.status, b2.retryAfter, b2.body.error.code]).toEqual([503, '1', 'overloaded']);
    expect(b2.ms).toBeLessThan(1000);
    expect([await holdsOf(a.tenantId), await holdsOf(b.tenantId)]).toEqual([3, 1]); // the refused ones hold nothing
    expect((await busy).status).toBe(200);
    for (const r of await Promise.all([a1, a2, b1])) expect(r.status).toBe(200);
    await stack.waitNoHolds(a.tenantId);
    await stack.waitNoHolds(b.tenantId);
    expect([await ledgerRows(a.tenantId), await ledgerRows(b.tenantId)]).toEqual([3, 1]);
    expect(await ledgerCheck(stack.db)).toMatchObject({ ok: true });
  });
});
