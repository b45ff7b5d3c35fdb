import type OpenAI from 'openai';
import { expect } from 'vitest';
import { ledgerCheck } from '../../src/billing/ledger-check.ts';
import { costMicros, type Prices } from '../../src/billing/money.ts';
import { expectBalanceEqualsLedger } from './ledger.ts';
import type { TestStack } from './stack.ts';

/** Polls a batch (the `openai` SDK) until it has ended: completed, cancelled, failed or expired. */
export async function batchEnded(client: OpenAI, id: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch ${id} still ${b.status}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A batch's output or error file, one parsed JSON object a line (none when the file is null). */
export async function fileLines<T>(client: OpenAI, fileId: string | null | undefined): Promise<T[]> {
  if (!fileId) return [];
  const text = await (await client.files.content(fileId)).text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
}

/** A tenant's balance, µBRL. */
export const balanceOf = async (stack: TestStack, tenantId: string): Promise<bigint> =>
  BigInt((await stack.db.query('select balance_micros from tenants where id = $1', [tenantId])).rows[0].balance_micros);

/** A line of an output file, as far as billing reads it (chat's usage names or the Responses/Anthropic ones). */
export interface BilledLine {
  response: { request_id: string; body: { usage?: Record<string, number> } } | null;
}

/**
 * Each answered line debited once, exactly its usage at `prices`, its ledger row naming `batchId`;
 * nothing else debited, no hold left, the balance the grant less those debits, balance = ledger.
 * Returns the total debited.
 */
export async function expectBatchBilled(stack: TestStack, tenantId: string, granted: bigint, batchId: string, answered: BilledLine[], prices: Prices) {
  await stack.waitSettled(
    answered.map((l) => l.response!.request_id),
    20_000,
  );
  await stack.waitNoHolds(tenantId, 20_000);
  const { rows } = await stack.db.query<{ request_id: string; amount_micros: string; batch_id: string }>(
    "select request_id, amount_micros, batch_id from ledger where tenant_id = $1 and kind = 'debit'",
    [tenantId],
  );
  expect(rows.length).toBe(answered.length);
  const debits = new Map(rows.map((r) => [r.request_id, BigInt(r.amount_micros)]));
  let total = 0n;
  for (const l of answered) {
    const u = l.response!.body.usage!;
    const cost = costMicros(u.prompt_tokens ?? u.input_tokens, u.completion_tokens ?? u.output_tokens ?? 0, prices);
    expect(cost).toBeGreaterThan(0n);
    expect(debits.get(l.response!.request_id)).toBe(cost);
    total += cost;
  }
  expect(new Set(rows.map((r) => r.batch_id))).toEqual(new Set(rows.length ? [batchId] : []));
  expect(await balanceOf(stack, tenantId)).toBe(granted - total);
  await expectBalanceEqualsLedger(stack, tenantId);
  expect((await ledgerCheck(stack.db, { tenantId })).ok).toBe(true);
  return total;
}
