// BATCH_MAX_LINES_IN_FLIGHT counts a tenant's lines not ended yet (src/batch/batches.ts admitBatch):
// each unfinished batch's `total` less its lines counted in `completed` and `failed`, less its lines
// ended not run (`batch_cancelled`, `batch_expired`: counted in neither). Batches of known counts and
// result rows, as the runners, the vendor loop and the sweeper leave them; admitBatch run in a
// transaction rolled back, as POST /v1/batches runs it. No services but PostgreSQL.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { admitBatch } from '../src/batch/batches.ts';
import { NOT_RUN } from '../src/batch/ending.ts';
import { createApiKey } from '../src/db/keys.ts';
import { createPool } from '../src/db/pool.ts';
import { createTenant } from '../src/db/tenants.ts';

const db = createPool(process.env.DATABASE_URL!, 2);
const uniq = () => randomBytes(6).toString('hex');
const batchId = () => `batch_${Date.now().toString(16).padStart(12, '0')}${uniq()}`;
let tenantId: string;

async function batch(tenant: string, key: string, b: { status: string; total: number; completed: number; failed: number; pastWindow?: boolean }) {
  const id = batchId();
  await db.query(
    `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, completed, failed, expires_at)
     values ($1, $2, $3, 'file-lines-in-flight', '/v1/chat/completions', '24h', $4, $5, $6, $7,
             case when $8::boolean then now() - interval '1 minute' else now() + interval '1 day' end)`,
    [id, tenant, key, b.status, b.total, b.completed, b.failed, b.pastWindow ?? false],
  );
  return id;
}

/** `n` result rows from line `from`: answered (`ok`/`failed` with a status), ended not run (an error, no status), or claimed and running. */
async function results(id: string, from: number, n: number, kind: 'ok' | 'failed' | '402' | 'cancelled' | 'expired' | 'interrupted' | 'running') {
  const [status, error, ok] = {
    ok: ['200', 'null', 'true'],
    failed: ['500', 'null', 'false'],
    '402': ['402', 'null', 'false'],
    cancelled: ['null', `'${JSON.stringify(NOT_RUN.cancelled)}'::jsonb`, 'false'],
    expired: ['null', `'${JSON.stringify(NOT_RUN.expired)}'::jsonb`, 'false'],
    // as LINE_INTERRUPTED writes it (its message names the request)
    interrupted: [
      'null',
      `jsonb_build_object('code', 'line_interrupted', 'message', 'The runner of this request stopped before recording its answer.')`,
      'false',
    ],
    running: ['null', 'null', 'null'],
  }[kind];
  await db.query(
    `insert into batch_results (batch_id, line, custom_id, request_id, status_code, error, ok)
     select $1, g, 'l-' || g, 'gen-' || $1 || '-' || g, ${status}, ${error}, ${ok} from generate_series($2::int, $2::int + $3::int - 1) g`,
    [id, from, n],
  );
}

beforeAll(async () => {
  tenantId = (await createTenant(db, `lines-in-flight-${uniq()}`)).id;
  const key = (await createApiKey(db, { tenantId, label: 'lines' })).record.id;
  // in progress: 100 lines, 30 answered, 10 failed (its rows not read: a batch in its window has no line ended not run) → 60
  await batch(tenantId, key, { status: 'in_progress', total: 100, completed: 30, failed: 10 });
  // cancelling: 50 lines, 5 answered, 2 failed (a 500, a 402 of the balance), 39 not run, 4 still running → 4
  const cancelling = await batch(tenantId, key, { status: 'cancelling', total: 50, completed: 5, failed: 2 });
  await results(cancelling, 0, 5, 'ok');
  await results(cancelling, 5, 1, 'failed');
  await results(cancelling, 6, 1, '402');
  await results(cancelling, 7, 39, 'cancelled');
  await results(cancelling, 46, 4, 'running');
  // past its window, not ended yet: 10 lines, 2 answered, 1 interrupted (failed), 3 expired not run → 4
  const late = await batch(tenantId, key, { status: 'in_progress', total: 10, completed: 2, failed: 1, pastWindow: true });
  await results(late, 0, 2, 'ok');
  await results(late, 2, 1, 'interrupted');
  await results(late, 3, 3, 'expired');
  // ended batches hold nothing
  await batch(tenantId, key, { status: 'completed', total: 1000, completed: 1000, failed: 0 });
  await batch(tenantId, key, { status: 'cancelled', total: 1000, completed: 1, failed: 0 });
  // another tenant's batch is not counted
  const other = (await createTenant(db, `lines-in-flight-other-${uniq()}`)).id;
  await batch(other, (await createApiKey(db, { tenantId: other, label: 'other' })).record.id, { status: 'in_progress', total: 1000, completed: 0, failed: 0 });
});
afterAll(() => db.end());

/** admitBatch as POST /v1/batches runs it, rolled back: null when admitted, else the refusal. */
async function admit(lines: number, limits = { maxBatches: 4, maxLines: 100 }) {
  const client = await db.connect();
  try {
    await client.query('begin');
    await admitBatch(client, tenantId, lines, limits);
    return null;
  } catch (err) {
    const e = err as { status: number; code: string; message: string };
    return { status: e.status, code: e.code, message: e.message };
  } finally {
    await client.query('rollback');
    client.release();
  }
}

it('the lines not ended: 60 + 4 + 4 = 68 of 100; 32 more are taken, 33 are a 429 that says so', async () => {
  expect(await admit(32)).toBeNull();
  expect(await admit(33)).toEqual({
    status: 429,
    code: 'batch_limit_exceeded',
    message:
      "Your batches in progress hold 68 requests not ended yet; this batch's 33 would pass the most a tenant may have in progress at once (BATCH_MAX_LINES_IN_FLIGHT = 100). Wait for a batch to end, or cancel one, then try again.",
  });
});

it('the lines that end free room: the cancelling batch’s running lines end, and 4 more are taken', async () => {
  const { rows } = await db.query("select id from batches where tenant_id = $1 and status = 'cancelling'", [tenantId]);
  const id = rows[0].id;
  // what a runner writes as a running line ends: its answer, and the batch's count
  await db.query(
    `with r as (update batch_results set status_code = 200, ok = true where batch_id = $1 and ok is null returning ok)
     update batches set completed = completed + (select count(*) from r) where id = $1`,
    [id],
  );
  expect(await admit(36)).toBeNull();
  expect((await admit(37))?.message).toContain('hold 64 requests not ended yet');
});

it('the count of batches is unchanged: three unfinished batches, a fourth taken, a fifth not', async () => {
  expect(await admit(1, { maxBatches: 4, maxLines: 1000 })).toBeNull();
  expect((await admit(1, { maxBatches: 3, maxLines: 1000 }))?.message).toBe(
    'You have 3 batches in progress, the most a tenant may have at once (BATCH_MAX_IN_FLIGHT = 3). Wait for one to end, or cancel one, then try again.',
  );
});
