// balance.low and balance.depleted carry the balance the crossing debit left (docs/notifications.md),
// not the balance metering found when it checked: here the debits settle 100 ms apart while metering
// checks at most every CHECK_EVERY_MS (250 ms), so one or two later debits have settled by the time
// the check after the crossing runs. A real metering process on its own nats-server (JetStream) and
// PostgreSQL; the usage messages are published to the USAGE stream as a worker publishes them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatBrl } from '../../src/billing/money.ts';
import { encode, type UsageMessage } from '../../src/bus/messages.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { CHECK_EVERY_MS } from '../../src/notify/settled.ts';
import { saveSettings } from '../../src/notify/settings.ts';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { until } from './receiver.ts';

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ gateways: 0, workers: 0 });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
});

/** 7 input tokens at R$ 1,00 and 6 output tokens at R$ 100.000,00 per million: R$ 0,600007 a request. */
const COST = 600_007n;
const usage = (tenantId: string, keyId: string, i: number): UsageMessage => ({
  v: 1,
  request_id: `req_crossing_${tenantId}_${i}`,
  tenant_id: tenantId,
  key_id: keyId,
  model: 'sim/echo',
  pool: 'sim',
  input_price: '1000000',
  output_price: '100000000000',
  prompt_tokens: 7,
  completion_tokens: 6,
  estimated: false,
  outcome: 'completed',
  ended_at: Date.now(),
  worker: 'wrk_crossing_test',
});

const ledgerAfter = async (tenantId: string) =>
  (await stack.db.query(`select request_id, amount_micros, balance_after_micros from ledger where tenant_id = $1 and kind = 'debit' order by id`, [tenantId]))
    .rows as Array<{ request_id: string; amount_micros: bigint; balance_after_micros: bigint }>;
const eventsOf = async (tenantId: string) =>
  (await stack.db.query('select type, data from notify_events where tenant_id = $1 order by created_at', [tenantId])).rows as Array<{
    type: string;
    data: Record<string, unknown>;
  }>;

describe('the balance events carry the balance the crossing debit left, with debits 100 ms apart', () => {
  let low: { tenantId: string; keyId: string };
  let depleted: { tenantId: string; keyId: string };
  const N = 5;

  beforeAll(async () => {
    expect(CHECK_EVERY_MS).toBeGreaterThan(200); // one or two more debits land before the check after the crossing
    low = await stack.tenant('10.00');
    await saveSettings(stack.db, low.tenantId, { lowBalanceMicros: 9_000_000n, emailEvents: [] });
    depleted = await stack.tenant('1.205000');
    const js = stack.nc.jetstream();
    for (let i = 0; i < N; i++) {
      for (const t of [low, depleted]) {
        const u = usage(t.tenantId, t.keyId, i);
        await js.publish(subjects.usage('sim'), encode(u), { msgID: u.request_id });
      }
      if (i < N - 1) await new Promise((r) => setTimeout(r, 100));
    }
    await stack.waitSettled(
      [low, depleted].flatMap((t) => Array.from({ length: N }, (_, i) => usage(t.tenantId, t.keyId, i).request_id)),
      15_000,
    );
  });

  it('balance.low: what the debit that took the balance below R$ 9,00 left', async () => {
    // R$ 10,00: 9,399993 (above), 8,799986 (the crossing), then 8,199979, 7,599972, 6,999965
    expect((await ledgerAfter(low.tenantId)).map((r) => r.balance_after_micros)).toEqual(
      Array.from({ length: N }, (_, i) => 10_000_000n - BigInt(i + 1) * COST),
    );
    await until('balance.low made', async () => (await eventsOf(low.tenantId)).length > 0);
    await new Promise((r) => setTimeout(r, 2 * CHECK_EVERY_MS)); // any later check: nothing more
    expect(await eventsOf(low.tenantId)).toEqual([{ type: 'balance.low', data: { tenant_id: low.tenantId, balance: '8.799986', threshold: '9.000000' } }]);
  });

  it('balance.depleted: what the debit that took the balance below R$ 0,01 left', async () => {
    // R$ 1,205000: 0,604993, then 0,004986 (the crossing), then 0 (a shortfall: the rest of the
    // balance), 0, 0. No threshold set: balance.depleted only
    expect((await ledgerAfter(depleted.tenantId)).map((r) => [r.amount_micros, r.balance_after_micros])).toEqual([
      [COST, 604_993n],
      [COST, 4_986n],
      [4_986n, 0n],
      [0n, 0n],
      [0n, 0n],
    ]);
    await until('balance.depleted made', async () => (await eventsOf(depleted.tenantId)).length > 0);
    await new Promise((r) => setTimeout(r, 2 * CHECK_EVERY_MS));
    expect(await eventsOf(depleted.tenantId)).toEqual([
      { type: 'balance.depleted', data: { tenant_id: depleted.tenantId, balance: formatBrl(4_986n), depleted_below: '0.010000' } },
    ]);
  });
});
