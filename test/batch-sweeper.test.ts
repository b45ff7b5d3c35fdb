import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newBatchId } from '../src/batch/batches.ts';
import { newMessageBatchId } from '../src/batch/message-batches.ts';
import { startStack, type TestStack } from './helpers/stack.ts';

// Metering's sweeper for batches (src/batch/sweeper.ts): a batch past its window that no runner
// will end (its lines all taken and one stuck, or its queue messages lost) is ended `expired` — the
// stuck line `line_interrupted`, the lines never taken `batch_expired`, its files written — or
// `cancelled` when it was being cancelled; and the rows of batches ended BATCH_RETENTION_DAYS ago
// are deleted. The states are set up in the test database (timestamps in the past, a claimed line
// without an answer, lines without a queue message), then the sweeper (every 500 ms) ends them.

const ACK_WAIT_MS = 2000;
let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { BATCH_ACK_WAIT_MS: String(ACK_WAIT_MS), BATCH_RETENTION_DAYS: '30' } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });
const chatLine = (i: number) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'sim/echo', messages: [{ role: 'user', content: 'hi' }] },
  });

interface Tenant {
  tenantId: string;
  keyId: string;
  key: string;
}

async function inputFile(t: Tenant, lines: number): Promise<string> {
  const body = `${Array.from({ length: lines }, (_, i) => chatLine(i)).join('\n')}\n`;
  return (await clientOf(t.key).files.create({ file: await toFile(Buffer.from(body), 'in.jsonl'), purpose: 'batch' })).id;
}

const windows = new Map<string, string>();

/**
 * A batch row as the API would have left it, its window ending `expiresIn` from now. A window
 * already passed (negative) is set by windowPassed, once the test has written the batch's lines:
 * metering's sweeper (every 500 ms) would end the batch under the test's feet.
 */
async function batchRow(t: Tenant, fileId: string, o: { total: number; status: string; expiresIn: string; completed?: number; api?: string; id?: string }) {
  const id = o.id ?? newBatchId();
  await stack.db.query(
    `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, completed, expires_at, in_progress_at, api, cancelling_at)
     values ($1, $2, $3, $4, $5, '24h', $6, $7, $8, now() + $9::interval, now() - interval '1 day', $10, case when $6 = 'cancelling' then now() end)`,
    [
      id,
      t.tenantId,
      t.keyId,
      fileId,
      o.api === 'anthropic' ? '/v1/messages' : '/v1/chat/completions',
      o.status,
      o.total,
      o.completed ?? 0,
      o.expiresIn.startsWith('-') ? '1 hour' : o.expiresIn,
      o.api ?? 'openai',
    ],
  );
  if (o.expiresIn.startsWith('-')) windows.set(id, o.expiresIn);
  return id;
}

async function windowPassed(...ids: string[]) {
  for (const id of ids) await stack.db.query('update batches set expires_at = now() + $2::interval where id = $1', [id, windows.get(id)]);
}

const answered = (batchId: string, line: number) =>
  stack.db.query(
    `insert into batch_results (batch_id, line, custom_id, request_id, status_code, body, ok)
     values ($1, $2, $3, $4, 200, $5, true)`,
    [batchId, line, `req-${line}`, `gen-answered-${line}`, { object: 'chat.completion', id: `gen-answered-${line}` }],
  );
const claimed = (batchId: string, line: number, requestId: string) =>
  stack.db.query('insert into batch_results (batch_id, line, custom_id, request_id) values ($1, $2, $3, $4)', [batchId, line, `req-${line}`, requestId]);

async function waitStatus(batchId: string, status: string, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await stack.db.query('select status from batches where id = $1', [batchId]);
    if (rows[0]?.status === status) return;
    if (Date.now() > deadline) throw new Error(`batch ${batchId} is ${rows[0]?.status}, not ${status}`);
    await sleep(100);
  }
}

async function fileLines(key: string, fileId: string | null | undefined) {
  if (!fileId) return [];
  return (await (await clientOf(key).files.content(fileId)).text())
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

describe("metering's batch sweeper", () => {
  it('ends a batch past its window whose lines were all taken, one stuck, others never queued: expired, its error lines and files', async () => {
    const t = await stack.tenant('1');
    const fileId = await inputFile(t, 4);
    const id = await batchRow(t, fileId, { total: 4, status: 'in_progress', expiresIn: '-1 hour', completed: 1 });
    await answered(id, 0);
    await claimed(id, 1, 'gen-stuck-1');
    await windowPassed(id);
    await waitStatus(id, 'expired');
    const b = await clientOf(t.key).batches.retrieve(id);
    expect(b).toMatchObject({ status: 'expired', request_counts: { total: 4, completed: 1, failed: 1 }, completed_at: null, cancelled_at: null });
    expect(b.expired_at).toEqual(expect.any(Number));
    expect(await fileLines(t.key, b.output_file_id)).toEqual([
      {
        id: `batch_req_${id.slice(6)}_1`,
        custom_id: 'req-0',
        response: { status_code: 200, request_id: 'gen-answered-0', body: { object: 'chat.completion', id: 'gen-answered-0' } },
        error: null,
      },
    ]);
    const expired = { code: 'batch_expired', message: 'The batch expired (its completion window passed) before this request ran.' };
    expect(await fileLines(t.key, b.error_file_id)).toEqual([
      {
        id: `batch_req_${id.slice(6)}_2`,
        custom_id: 'req-1',
        response: null,
        error: {
          code: 'line_interrupted',
          message:
            'The runner of this request stopped before recording its answer. It was request gen-stuck-1: /v1/generation?id=gen-stuck-1 tells whether it ran and was billed.',
        },
      },
      { id: `batch_req_${id.slice(6)}_3`, custom_id: 'req-2', response: null, error: expired },
      { id: `batch_req_${id.slice(6)}_4`, custom_id: 'req-3', response: null, error: expired },
    ]);
  }, 30_000);

  it('a batch being cancelled past its window ends cancelled; an Anthropic one expired, its results typed', async () => {
    const t = await stack.tenant('1');
    const fileId = await inputFile(t, 3);
    const cancelling = await batchRow(t, fileId, { total: 3, status: 'cancelling', expiresIn: '-1 hour', completed: 1 });
    await answered(cancelling, 0);
    const anthropic = await batchRow(t, fileId, { total: 3, status: 'in_progress', expiresIn: '-1 hour', api: 'anthropic', id: newMessageBatchId() });
    await claimed(anthropic, 2, 'gen-stuck-2');
    await windowPassed(cancelling, anthropic);
    await waitStatus(cancelling, 'cancelled');
    await waitStatus(anthropic, 'expired');
    const c = await clientOf(t.key).batches.retrieve(cancelling);
    expect(c.request_counts).toEqual({ total: 3, completed: 1, failed: 0 });
    expect((await fileLines(t.key, c.error_file_id)).map((l: { custom_id: string; error: { code: string } }) => [l.custom_id, l.error.code])).toEqual([
      ['req-1', 'batch_cancelled'],
      ['req-2', 'batch_cancelled'],
    ]);
    const origin = stack.baseUrl.replace(/\/v1$/, '');
    const headers = { 'x-api-key': t.key, 'anthropic-version': '2023-06-01' };
    const m = await (await fetch(`${origin}/v1/messages/batches/${anthropic}`, { headers })).json();
    expect(m).toMatchObject({ processing_status: 'ended', request_counts: { processing: 0, succeeded: 0, errored: 1, canceled: 0, expired: 2 } });
    const results = (await (await fetch(`${origin}/v1/messages/batches/${anthropic}/results`, { headers })).text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(results.map((r: { custom_id: string; result: { type: string } }) => [r.custom_id, r.result.type])).toEqual([
      ['req-0', 'expired'],
      ['req-1', 'expired'],
      ['req-2', 'errored'],
    ]);
  }, 30_000);

  it('leaves a batch whose window has not passed, or passed less than the ack wait ago, to its runners', async () => {
    const t = await stack.tenant('1');
    const fileId = await inputFile(t, 2);
    const open = await batchRow(t, fileId, { total: 2, status: 'in_progress', expiresIn: '1 hour' });
    await claimed(open, 0, 'gen-running-0');
    const justPassed = await batchRow(t, fileId, { total: 2, status: 'in_progress', expiresIn: '-100 milliseconds' });
    await claimed(justPassed, 0, 'gen-running-1');
    // a vendor-mode batch long past catraca's window: its chunks run on at the vendor, its own loop ends it
    const vendorMode = await batchRow(t, fileId, { total: 2, status: 'in_progress', expiresIn: '-1 hour' });
    await stack.db.query("update batches set mode = 'vendor' where id = $1", [vendorMode]);
    await claimed(vendorMode, 0, 'gen-at-the-vendor-0');
    await windowPassed(justPassed, vendorMode);
    // several sweeps (every 500 ms) within the ack wait after justPassed's window
    await sleep(1200);
    const { rows } = await stack.db.query(
      `select b.id, b.status, b.failed, (select count(*)::int from batch_results r where r.batch_id = b.id) as results
         from batches b where b.id = any($1) order by b.id`,
      [[open, justPassed]],
    );
    expect(rows).toEqual(
      [
        { id: open, status: 'in_progress', failed: 0, results: 1 },
        { id: justPassed, status: 'in_progress', failed: 0, results: 1 },
      ].sort((a, b) => (a.id < b.id ? -1 : 1)),
    );
    // once the ack wait has passed too, the sweeper ends the second
    await waitStatus(justPassed, 'expired', 10_000);
    expect((await stack.db.query('select status from batches where id = $1', [open])).rows[0].status).toBe('in_progress');
    const { rows: vendor } = await stack.db.query(
      'select status, failed, (select count(*)::int from batch_results r where r.batch_id = b.id and r.ok is null) as running from batches b where id = $1',
      [vendorMode],
    );
    expect(vendor).toEqual([{ status: 'in_progress', failed: 0, running: 1 }]);
    await stack.db.query("update batches set status = 'cancelled', cancelled_at = now() where id = any($1)", [[open, vendorMode]]); // not left for later sweeps
  }, 30_000);

  it('deletes the rows of batches ended BATCH_RETENTION_DAYS ago, keeps newer ones and unfinished ones', async () => {
    const t = await stack.tenant('1');
    const fileId = await inputFile(t, 1);
    const ended = async (status: string, column: string, ago: string, api = 'openai', vendorChunk = false) => {
      const id = await batchRow(t, fileId, { total: 1, status, expiresIn: '1 hour', api, id: api === 'anthropic' ? newMessageBatchId() : undefined });
      // vendor mode's chunks go with their batch's rows
      if (vendorChunk)
        await stack.db.query(
          "insert into vendor_batch_chunks (batch_id, chunk, model_id, deployment, pool, lines) values ($1, 0, 'sim/echo', 'primary', 'sim', '{0}')",
          [id],
        );
      // the rows first: once the batch is old, the sweeper (every 500 ms) may delete it at any moment
      await answered(id, 0);
      await stack.db.query(`update batches set ${column} = now() - $2::interval, finalizing_at = now() - $2::interval where id = $1`, [id, ago]);
      return id;
    };
    const old = await ended('completed', 'completed_at', '31 days', 'openai', true);
    const oldCancelled = await ended('cancelled', 'cancelled_at', '30 days 1 minute');
    const oldAnthropic = await ended('expired', 'expired_at', '45 days', 'anthropic');
    const recent = await ended('completed', 'completed_at', '29 days', 'openai', true);
    const unfinished = await batchRow(t, fileId, { total: 1, status: 'in_progress', expiresIn: '1 hour' });
    await stack.db.query("update batches set created_at = now() - interval '60 days', in_progress_at = now() - interval '60 days' where id = $1", [unfinished]);
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { rows } = await stack.db.query('select count(*)::int as n from batches where id = any($1)', [[old, oldCancelled, oldAnthropic]]);
      if (rows[0].n === 0) break;
      if (Date.now() > deadline) throw new Error(`${rows[0].n} old batches not deleted`);
      await sleep(100);
    }
    const { rows: kept } = await stack.db.query('select id from batches where tenant_id = $1 order by id', [t.tenantId]);
    expect(kept.map((r: { id: string }) => r.id)).toEqual([recent, unfinished].sort());
    const { rows: results } = await stack.db.query('select batch_id from batch_results where batch_id = any($1) order by batch_id', [
      [old, oldCancelled, oldAnthropic, recent, unfinished],
    ]);
    expect(results).toEqual([{ batch_id: recent }]);
    const { rows: chunks } = await stack.db.query('select batch_id from vendor_batch_chunks where batch_id = any($1)', [[old, recent]]);
    expect(chunks).toEqual([{ batch_id: recent }]);
    const refused = await clientOf(t.key)
      .batches.retrieve(old)
      .catch((e: InstanceType<typeof OpenAI.APIError>) => e.status);
    expect(refused).toBe(404);
    await stack.db.query("update batches set status = 'cancelled', cancelled_at = now() where id = $1", [unfinished]);
  }, 30_000);
});
