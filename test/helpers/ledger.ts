import { expect } from 'vitest';
import type { TestStack } from './stack.ts';

// What the stack tests assert of the ledger after a request: its one debit, and a tenant's
// balance equal to the sum of its ledger.

// biome-ignore lint/suspicious/noExplicitAny: a row of \`ledger\` as pg returns it, read column by column
type LedgerRow = Record<string, any>;

/** The one debit of a request, once metering has settled it (fails on none or more than one). */
export async function debitOf(stack: TestStack, requestId: string): Promise<LedgerRow> {
  await stack.waitSettled([requestId]);
  const { rows } = await stack.db.query("select * from ledger where request_id = $1 and kind = 'debit'", [requestId]);
  expect(rows).toHaveLength(1);
  return rows[0];
}

export async function expectBalanceEqualsLedger(stack: TestStack, tenantId: string): Promise<void> {
  const { rows } = await stack.db.query(
    `select t.balance_micros,
            (select coalesce(sum(case l.kind when 'debit' then -l.amount_micros else l.amount_micros end), 0) from ledger l where l.tenant_id = t.id) as sum
       from tenants t where t.id = $1`,
    [tenantId],
  );
  expect(BigInt(rows[0].balance_micros)).toBe(BigInt(rows[0].sum));
}

/** The JSON payloads of an SSE body (`data: {…}` events; `[DONE]` and comments left out). */
export const sseChunks = (text: string) =>
  text
    .split('\n\n')
    .map((e) => e.replace(/^data: /, ''))
    .filter((d) => d.startsWith('{'))
    .map((d) => JSON.parse(d));
