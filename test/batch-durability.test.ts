import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerCheck } from '../src/billing/ledger-check.ts';
import { costMicros } from '../src/billing/money.ts';
import { type Proc, SIM_PRICES, startStack, stopProcess, type TestStack } from './helpers/stack.ts';

// Batches (`queue` mode) through crashes: real processes killed by SIGKILL mid-batch. Whatever was
// killed, every line of the batch ends exactly once (its results row, its line in the output or the
// error file), no line is billed twice (every debit's request id is unique and a line's of this
// batch), every line answered 200 is debited exactly its usage, the balance is the ledger's, and
// request_counts add up to the lines. The queue's ack wait is short here (BATCH_ACK_WAIT_MS): a
// line a killed front door had claimed comes back to the other door within seconds and ends
// `line_interrupted`, naming its request.

const ACK_WAIT_MS = 6000;
const CONCURRENCY = 4;
let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    gateways: 2,
    workers: 2,
    env: {
      BATCH_CONCURRENCY: String(CONCURRENCY),
      BATCH_ACK_WAIT_MS: String(ACK_WAIT_MS),
      STREAM_IDLE_TIMEOUT_MS: '2000',
      REQUEST_TIMEOUT_MS: '5000',
      HOLD_GRACE_MS: '500',
      KEEPALIVE_MS: '500',
      METERING_ACK_WAIT_MS: '2000',
    },
  });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 2 });

const chatLine = (i: number) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'sim/echo', max_tokens: 16, messages: [{ role: 'user', content: `hello number ${i}` }], sim: { first_token_ms: 250 } },
  });

async function startBatch(key: string, lines: number) {
  const client = clientOf(key);
  const body = `${Array.from({ length: lines }, (_, i) => chatLine(i)).join('\n')}\n`;
  const file = await client.files.create({ file: await toFile(Buffer.from(body), 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

/** Waits until `n` lines of the batch have ended (its runners are busy mid-batch). */
async function waitLines(batchId: string, n: number) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { rows } = await stack.db.query('select count(*)::int as n from batch_results where batch_id = $1 and ok is not null', [batchId]);
    if (rows[0].n >= n) return;
    if (Date.now() > deadline) throw new Error(`batch ${batchId}: ${rows[0].n} lines ended, not ${n}`);
    await sleep(50);
  }
}

async function waitEnded(key: string, batchId: string, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await stack.db.query('select status from batches where id = $1', [batchId]);
    if (['completed', 'cancelled', 'failed', 'expired'].includes(rows[0].status)) return clientOf(key).batches.retrieve(batchId);
    if (Date.now() > deadline) throw new Error(`batch ${batchId} still ${rows[0].status}`);
    await sleep(200);
  }
}

interface FileLine {
  custom_id: string;
  response: { status_code: number; request_id: string | null; body: Record<string, unknown> } | null;
  error: { code: string; message: string } | null;
}

async function fileLines(key: string, fileId: string | null | undefined): Promise<FileLine[]> {
  if (!fileId) return [];
  const text = await (await clientOf(key).files.content(fileId)).text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

interface ResultRow {
  line: number;
  custom_id: string;
  request_id: string | null;
  status_code: number | null;
  ok: boolean | null;
  error: { code: string; message: string } | null;
}

/**
 * The batch ended `completed` with every line accounted for once; the debits exactly the lines
 * answered 200 at their usage, plus at most one for each interrupted line (it may have run); the
 * balance the grant less the debits, the ledger's. Returns the lines by how they ended.
 */
async function expectAccounted(t: { tenantId: string; key: string }, grantedMicros: bigint, batchId: string, total: number) {
  const batch = await waitEnded(t.key, batchId);
  expect(batch.status).toBe('completed');
  const { rows } = await stack.db.query<ResultRow>(
    'select line, custom_id, request_id, status_code, ok, error from batch_results where batch_id = $1 order by line',
    [batchId],
  );
  // no line lost, none ended twice
  expect(rows.map((r) => r.line)).toEqual(Array.from({ length: total }, (_, i) => i));
  expect(rows.every((r) => r.ok !== null)).toBe(true);
  const ok = rows.filter((r) => r.ok);
  const failed = rows.filter((r) => !r.ok);
  expect(batch.request_counts).toEqual({ total, completed: ok.length, failed: failed.length });
  const output = await fileLines(t.key, batch.output_file_id);
  const errorsFile = await fileLines(t.key, batch.error_file_id);
  expect(output.map((l) => l.custom_id)).toEqual(ok.map((r) => r.custom_id));
  expect(errorsFile.map((l) => l.custom_id)).toEqual(failed.map((r) => r.custom_id));
  // each line answered 200 debited once, exactly its usage
  const okIds = output.map((l) => l.response?.request_id as string);
  await stack.waitSettled(okIds, 30_000);
  await stack.waitNoHolds(t.tenantId, 30_000);
  const { rows: debits } = await stack.db.query<{ request_id: string; amount_micros: bigint; batch_id: string }>(
    "select request_id, amount_micros, batch_id from ledger where tenant_id = $1 and kind = 'debit'",
    [t.tenantId],
  );
  const debitOf = new Map(debits.map((d) => [d.request_id, BigInt(d.amount_micros)]));
  expect(debitOf.size).toBe(debits.length); // every debit's request id unique: nothing billed twice
  const lineIds = new Set(rows.map((r) => r.request_id).filter((id) => id !== null));
  for (const d of debits) {
    expect(lineIds.has(d.request_id)).toBe(true);
    expect(d.batch_id).toBe(batchId);
  }
  for (const l of output) {
    const usage = l.response?.body.usage as { prompt_tokens: number; completion_tokens: number };
    expect(debitOf.get(l.response?.request_id as string)).toBe(costMicros(usage.prompt_tokens, usage.completion_tokens, SIM_PRICES.echo));
  }
  // a failed line answered by its route (not interrupted) was never debited
  for (const r of failed.filter((r) => r.error?.code !== 'line_interrupted')) expect(debitOf.has(r.request_id as string)).toBe(false);
  const debited = debits.reduce((s, d) => s + BigInt(d.amount_micros), 0n);
  const { rows: tenant } = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [t.tenantId]);
  expect(BigInt(tenant[0].balance_micros)).toBe(grantedMicros - debited);
  expect(BigInt(tenant[0].held_micros)).toBe(0n);
  expect(BigInt(tenant[0].balance_micros) >= 0n).toBe(true);
  expect((await ledgerCheck(stack.db, { tenantId: t.tenantId })).ok).toBe(true);
  return { rows, ok, failed, output, errorsFile, debitOf };
}

function expectInterrupted(failed: ResultRow[], errorsFile: FileLine[]) {
  for (const r of failed) {
    expect(r.request_id).toMatch(/^gen-/);
    expect(r.status_code).toBeNull();
    expect(r.error).toEqual({
      code: 'line_interrupted',
      message: `The runner of this request stopped before recording its answer. It was request ${r.request_id}: /v1/generation?id=${r.request_id} tells whether it ran and was billed.`,
    });
  }
  for (const l of errorsFile) expect(l).toMatchObject({ response: null, error: { code: 'line_interrupted' } });
}

const kill = async (list: Proc[], p: Proc) => {
  await stopProcess(p, 'SIGKILL');
  list.splice(list.indexOf(p), 1);
};

describe('batches through crashes (queue mode)', () => {
  it('a front door killed mid-batch: the other door finishes it; the lines it had claimed end line_interrupted, none lost or billed twice', async () => {
    const t = await stack.tenant('10');
    const total = 120;
    const batch = await startBatch(t.key, total);
    await waitLines(batch.id, 16);
    // the door the client does not use: both doors' runners take lines
    await kill(stack.gateways, stack.gateways[1]);
    const { failed, errorsFile, ok, debitOf } = await expectAccounted(t, 10_000_000n, batch.id, total);
    // the lines the killed door had claimed (at most BATCH_CONCURRENCY): interrupted, each billed at most once
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.length).toBeLessThanOrEqual(CONCURRENCY);
    expectInterrupted(failed, errorsFile);
    expect(ok.length).toBe(total - failed.length);
    // one the killed door had dispatched was finished by its worker and billed once (a debit of its
    // request id); one claimed but not yet dispatched was never billed
    const billed = failed.filter((r) => debitOf.has(r.request_id as string)).length;
    expect(billed).toBeLessThanOrEqual(failed.length);
    await stack.spawnGateway();
  }, 120_000);

  it('a worker killed mid-batch: its lines end with their error answer, unbilled; the other worker runs the rest', async () => {
    const t = await stack.tenant('10');
    const total = 120;
    const batch = await startBatch(t.key, total);
    await waitLines(batch.id, 16);
    await kill(stack.workers, stack.workers[1]);
    const { failed, errorsFile, ok } = await expectAccounted(t, 10_000_000n, batch.id, total);
    // the lines the killed worker was answering (at most the two doors' runners): 504 after the stream's idle timeout
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.length).toBeLessThanOrEqual(2 * CONCURRENCY);
    for (const l of errorsFile)
      expect(l.response).toMatchObject({ status_code: 504, request_id: expect.stringMatching(/^gen-/), body: { error: { type: 'timeout_error' } } });
    expect(ok.length).toBe(total - failed.length);
    await stack.spawnWorker();
  }, 120_000);

  it('metering killed mid-batch: the lines run on; after its restart every line is debited exactly once', async () => {
    const t = await stack.tenant('10');
    const total = 120;
    const batch = await startBatch(t.key, total);
    await waitLines(batch.id, 16);
    await kill(stack.metering, stack.metering[0]);
    const ended = await waitEnded(t.key, batch.id);
    expect(ended.request_counts).toEqual({ total, completed: total, failed: 0 });
    // nothing settles while metering is down: holds stay open
    const { rows: open } = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [t.tenantId]);
    expect(open[0].n).toBeGreaterThan(0);
    await stack.spawnMetering();
    const { failed, ok } = await expectAccounted(t, 10_000_000n, batch.id, total);
    expect(failed).toEqual([]);
    expect(ok.length).toBe(total);
  }, 120_000);

  it('the whole stack killed mid-batch and started again (NATS too): the batch completes, none lost or billed twice', async () => {
    const t = await stack.tenant('10');
    const total = 120;
    const batch = await startBatch(t.key, total);
    await waitLines(batch.id, 16);
    await Promise.all([
      ...[...stack.gateways].map((p) => kill(stack.gateways, p)),
      ...[...stack.workers].map((p) => kill(stack.workers, p)),
      ...[...stack.metering].map((p) => kill(stack.metering, p)),
    ]);
    const { rows: before } = await stack.db.query('select count(*)::int as n from batch_results where batch_id = $1 and ok is not null', [batch.id]);
    expect(before[0].n).toBeLessThan(total);
    await stack.restartNats(500);
    await Promise.all([stack.spawnWorker(), stack.spawnWorker(), stack.spawnMetering()]);
    await Promise.all([stack.spawnGateway(), stack.spawnGateway()]);
    const { failed, errorsFile, ok } = await expectAccounted(t, 10_000_000n, batch.id, total);
    // the lines the two killed doors had claimed: interrupted (billed once if a worker had finished one before it died)
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.length).toBeLessThanOrEqual(2 * CONCURRENCY);
    expectInterrupted(failed, errorsFile);
    expect(ok.length).toBe(total - failed.length);
  }, 180_000);
});
