import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, stopProcess, type Proc, type TestStack } from './helpers/stack.ts';
import { upsertModel } from '../src/db/models.ts';
import { ledgerCheck } from '../src/billing/ledger-check.ts';

// Admission leases (src/billing/admission.ts) through real processes: a busy key is admitted from
// a slice of its balance in memory; near exhaustion every request is admitted on its own; a front
// door killed while holding a lease cannot make anyone overspend; leases turn over under load.
// `exact/one`: free input, 1 µBRL per output token; the sim says exactly `sim.output_tokens`.
let stack: TestStack;

beforeAll(async () => {
  // short request ceilings so that a dead door's lease expires within the test
  stack = await startStack({ gateways: 2, workers: 1, env: { REQUEST_TIMEOUT_MS: '3000', HOLD_GRACE_MS: '1000', ADMISSION_LEASE_MS: '1000' } });
  await upsertModel(stack.db, { id: 'exact/one', pool: 'sim', upstream_model: 'lorem', input_price: 0n, output_price: 1_000_000n, max_output_tokens: 1000 });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const post = (door: Proc, key: string, body: Record<string, unknown>) =>
  fetch(`${stack.urlOf(door)}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'exact/one', messages: [{ role: 'user', content: 'go' }], ...body }),
  });
const tenantState = async (tenantId: string) =>
  (await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId])).rows[0] as {
    balance_micros: bigint;
    held_micros: bigint;
  };
const leasesOf = async (tenantId: string) =>
  (await stack.db.query(`select count(*)::int as n from holds where tenant_id = $1 and kind = 'lease'`, [tenantId])).rows[0].n as number;

/** A counter or gauge of a front door's /metrics; `label` (e.g. `via="lease"`) picks one series. */
async function metric(door: Proc, name: string, label = ''): Promise<number> {
  const port = JSON.parse(door.lines.find((l) => l.includes('front door listening'))!).metrics_port;
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = new RegExp(`^${name}\\{[^}]*${label}[^}]*\\} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

async function debitsOf(tenantId: string) {
  const { rows } = await stack.db.query(
    `select count(*)::int as n, coalesce(sum(amount_micros), 0)::bigint as total, count(*) filter (where note is not null)::int as shortfalls
       from ledger where tenant_id = $1 and kind = 'debit'`,
    [tenantId],
  );
  return rows[0] as { n: number; total: bigint; shortfalls: number };
}

describe('admission leases', () => {
  it('two front doors drain one tenant to exactly zero: every micro-real spent once, no overdraft', { timeout: 90000 }, async () => {
    const t = await stack.tenant('0.100000'); // 100 000 µBRL = exactly 1 000 requests of 100 tokens
    const body = { max_tokens: 100, sim: { output_tokens: 100 } };
    const leasedBefore =
      (await metric(stack.gateways[0], 'catraca_admissions_total', 'via="lease"')) +
      (await metric(stack.gateways[1], 'catraca_admissions_total', 'via="lease"'));
    let ok = 0;
    let refusedInARow = 0;
    let i = 0;
    const until = Date.now() + 60000;
    // 16 clients over both doors until the balance is gone and both doors refuse steadily (by
    // then every lease has been closed and the last requests were admitted on their own)
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (Date.now() < until && refusedInARow < 200) {
          const res = await post(stack.gateways[i++ % 2], t.key, body);
          if (res.status === 200) {
            ok++;
            refusedInARow = 0;
            expect((await res.json()).usage.completion_tokens).toBe(100);
          } else {
            expect(res.status).toBe(402);
            await res.body?.cancel();
            refusedInARow++;
            await new Promise((r) => setTimeout(r, 10));
          }
        }
      }),
    );
    expect(ok).toBe(1000);
    const leased =
      (await metric(stack.gateways[0], 'catraca_admissions_total', 'via="lease"')) +
      (await metric(stack.gateways[1], 'catraca_admissions_total', 'via="lease"'));
    // while the tenant was rich, requests were admitted from leases in memory; near the end, one by
    // one (how many from leases depends on timing: ~100-300 of 1000 here, fewer on a loaded machine)
    expect(leased - leasedBefore).toBeGreaterThan(50);
    await stack.waitNoHolds(t.tenantId, 15000);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 0n, held_micros: 0n });
    expect(await debitsOf(t.tenantId)).toEqual({ n: 1000, total: 100_000n, shortfalls: 0 });
    expect(await ledgerCheck(stack.db, { tenantId: t.tenantId })).toEqual({ ok: true, tenants_checked: 1, mismatches: [] });
  });

  it('leases turn over under load: each window closes its lease exactly, nothing stays held', { timeout: 60000 }, async () => {
    const t = await stack.tenant('10.00');
    const opened = await metric(stack.gateways[0], 'catraca_leases_opened_total');
    const ids: string[] = [];
    const until = Date.now() + 3500; // three and a half lease windows
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (Date.now() < until) {
          const res = await post(stack.gateways[0], t.key, { max_tokens: 50, sim: { output_tokens: 7 } });
          expect(res.status).toBe(200);
          ids.push(res.headers.get('x-request-id')!);
          await res.json();
        }
      }),
    );
    expect((await metric(stack.gateways[0], 'catraca_leases_opened_total')) - opened).toBeGreaterThanOrEqual(3);
    await stack.waitSettled(ids, 20000);
    await stack.waitNoHolds(t.tenantId, 15000);
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 10_000_000n - 7n * BigInt(ids.length), held_micros: 0n });
    expect(await debitsOf(t.tenantId)).toEqual({ n: ids.length, total: 7n * BigInt(ids.length), shortfalls: 0 });
    expect(await ledgerCheck(stack.db, { tenantId: t.tenantId })).toMatchObject({ ok: true });
  });

  it('a front door killed while holding a lease: its streams settle against the lease, the lease expires, nobody overspends', { timeout: 90000 }, async () => {
    const t = await stack.tenant('10.00');
    const victim = stack.gateways[1];
    // streams that last ~2 s (20 tokens at 10/s) through the door about to die
    const streams = Array.from({ length: 6 }, () =>
      post(victim, t.key, { stream: true, max_tokens: 50, sim: { output_tokens: 20, tokens_per_second: 10 } }).catch(() => null),
    );
    const started = await Promise.all(streams);
    expect(started.every((r) => r?.status === 200)).toBe(true);
    expect(await leasesOf(t.tenantId)).toBe(1);
    victim.child.kill('SIGKILL');
    await victim.exited;
    // the other door keeps serving the tenant meanwhile
    const other = await post(stack.gateways[0], t.key, { max_tokens: 50, sim: { output_tokens: 5 } });
    expect(other.status).toBe(200);
    await other.json();
    // the worker finishes the six streams (nobody cancels them) and they settle against the dead
    // door's lease; then the lease expires (1 s window + 3 s + 1 s) and the sweeper releases it
    await stack.waitNoHolds(t.tenantId, 30000);
    const d = await debitsOf(t.tenantId);
    expect(d).toEqual({ n: 7, total: 6n * 20n + 5n, shortfalls: 0 });
    expect(await tenantState(t.tenantId)).toEqual({ balance_micros: 10_000_000n - d.total, held_micros: 0n });
    expect(await ledgerCheck(stack.db, { tenantId: t.tenantId })).toMatchObject({ ok: true });
    await stopProcess(victim);
  });
});
