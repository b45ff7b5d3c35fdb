import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { createApiKey } from '../../src/db/keys.ts';
import { ROLES, type Role } from '../../src/db/members.ts';
import { createTenant } from '../../src/db/tenants.ts';
import { createSession } from '../../src/portal/auth.ts';
import { insertEntries, uniq } from './usage-fixture.ts';

// Batches of known content for the "Lotes" tests (route and Chromium), written as the superuser:
// the rows the batch API and its runner would have left (batches, batch_files, batch_results) and
// the lines' ledger debits naming their batch, through insertEntries (reconciled for ledger check).

export const PASSWORD = 'correct horse battery';

/**
 * The fixture's days: day n is n days after a UTC midnight ten days ago — recent, so that metering's
 * batch sweeper (BATCH_RETENTION_DAYS, run by other test files' stacks on the same database) keeps
 * them. The hours are fixed (13:00Z is 10:00 in São Paulo); brDay/enDay give the date as the pages show it.
 */
const today = new Date();
const BASE_MS = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate()) - 10 * 86_400_000;
export const dayAt = (day: number, time: string) => new Date(BASE_MS + day * 86_400_000 + Date.parse(`1970-01-01T${time}Z`)).toISOString();
const dayOf = (day: number) => new Date(BASE_MS + day * 86_400_000);
const pad = (n: number) => String(n).padStart(2, '0');
export const brDay = (day: number) => {
  const d = dayOf(day);
  return `${pad(d.getUTCDate())}/${pad(d.getUTCMonth() + 1)}/${d.getUTCFullYear()}`;
};
export const enDay = (day: number) => {
  const d = dayOf(day);
  return `${d.getUTCMonth() + 1}/${d.getUTCDate()}/${String(d.getUTCFullYear()).slice(2)}`;
};
export const batchId = (at: string, prefix = 'batch') => `${prefix}_${Date.parse(at).toString(16).padStart(12, '0')}${randomBytes(6).toString('hex')}`;
const fileId = () => `file-${Date.now().toString(16).padStart(12, '0')}${randomBytes(6).toString('hex')}`;

export interface BatchWorld {
  tenantId: string;
  emails: Record<Role, string>;
  sessions: Record<Role, string>;
  /** OpenAI chat batch, completed: 2 lines answered, 1 error, an output and an error file */
  chat: string;
  /** Anthropic message batch, ended: one succeeded, one errored */
  messages: string;
  /** OpenAI embeddings batch still running: no files */
  running: string;
  output: string;
  errors: string;
}

export const OUTPUT_JSONL = '{"id":"batch_req_1","custom_id":"a","response":{"status_code":200,"request_id":"gen-a","body":{"ok":1}},"error":null}\n';
export const ERRORS_JSONL =
  '{"id":"batch_req_3","custom_id":"c","response":{"status_code":404,"request_id":"gen-c","body":{"error":{"message":"no model"}}},"error":null}\n';

async function insertBatch(
  db: pg.Pool,
  b: {
    id: string;
    tenantId: string;
    keyId: string;
    api: 'openai' | 'anthropic';
    endpoint: string;
    status: string;
    at: string;
    ended?: string;
    total: number;
    completed: number;
    failed: number;
    output?: string;
    errors?: string;
  },
) {
  await db.query(
    `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, completed, failed, output_file_id, error_file_id,
                          created_at, in_progress_at, completed_at, expires_at, api)
     values ($1, $2, $3, 'file-input', $4, '24h', $5, $6, $7, $8, $9, $10, $11, $11, $12, case when $5 in ('validating', 'in_progress', 'cancelling') then now() + interval '1 day' else $11::timestamptz + interval '24 hours' end, $13)`,
    [b.id, b.tenantId, b.keyId, b.endpoint, b.status, b.total, b.completed, b.failed, b.output ?? null, b.errors ?? null, b.at, b.ended ?? null, b.api],
  );
}

async function insertFile(db: pg.Pool, id: string, tenantId: string, keyId: string, content: string, expired = false) {
  await db.query(
    `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at)
     values ($1, $2, $3, 'batch_output', 'x.jsonl', $4, 1, $5, now() + ($6::int * interval '1 day'))`,
    [id, tenantId, keyId, Buffer.byteLength(content), Buffer.from(content), expired ? -1 : 30],
  );
}

export async function batchWorld(db: pg.Pool, passwordHash: string): Promise<BatchWorld> {
  const tenantId = (await createTenant(db, `lotes-${uniq()}`)).id;
  const emails = {} as Record<Role, string>;
  const sessions = {} as Record<Role, string>;
  for (const role of ROLES) {
    const id = `usr_${uniq()}`;
    emails[role] = `${role}.${uniq()}@example.com`;
    await db.query(`insert into portal_users (id, tenant_id, email, password_hash, role, email_verified_at) values ($1, $2, $3, $4, $5, now())`, [
      id,
      tenantId,
      emails[role],
      passwordHash,
      role,
    ]);
    sessions[role] = (await createSession(db, id)).token;
  }
  const keyId = (await createApiKey(db, { tenantId, label: 'batch-key' })).record.id;
  const chat = batchId(dayAt(2, '13:00:00'));
  const messages = batchId(dayAt(3, '14:30:00'), 'msgbatch');
  const running = batchId(dayAt(4, '12:00:00'));
  const output = fileId();
  const errors = fileId();
  await insertFile(db, output, tenantId, keyId, OUTPUT_JSONL);
  await insertFile(db, errors, tenantId, keyId, ERRORS_JSONL);
  await insertBatch(db, {
    id: chat,
    tenantId,
    keyId,
    api: 'openai',
    endpoint: '/v1/chat/completions',
    status: 'completed',
    at: dayAt(2, '13:00:00'),
    ended: dayAt(2, '13:07:00'),
    total: 3,
    completed: 2,
    failed: 1,
    output,
    errors,
  });
  await insertBatch(db, {
    id: messages,
    tenantId,
    keyId,
    api: 'anthropic',
    endpoint: '/v1/messages',
    status: 'completed',
    at: dayAt(3, '14:30:00'),
    ended: dayAt(3, '14:31:00'),
    total: 2,
    completed: 1,
    failed: 1,
  });
  await db.query(
    `insert into batch_results (batch_id, line, custom_id, request_id, status_code, body, error, ok) values
       ($1, 0, 'm-1', 'gen-m1', 200, '{"type":"message","content":[{"type":"text","text":"oi"}]}', null, true),
       ($1, 1, 'm-2', 'gen-m2', 404, '{"type":"error","error":{"type":"not_found_error","message":"no such model"}}', null, false)`,
    [messages],
  );
  await insertBatch(db, {
    id: running,
    tenantId,
    keyId,
    api: 'openai',
    endpoint: '/v1/embeddings',
    status: 'in_progress',
    at: dayAt(4, '12:00:00'),
    total: 1000,
    completed: 10,
    failed: 0,
  });
  const line = (at: string, micros: bigint, batch: string | undefined) => ({
    at,
    kind: 'debit' as const,
    source: 'request',
    micros,
    balanceAfter: 0n,
    requestId: `req-${uniq()}`,
    keyId,
    model: 'sim/echo',
    batchId: batch,
    tokens: { input: 10, output: 5 },
  });
  await insertEntries(db, tenantId, [
    { at: dayAt(1, '10:00:00'), kind: 'credit', source: 'grant', micros: 100_000_000n, balanceAfter: 100_000_000n },
    line(dayAt(2, '13:01:00'), 1_234_567n, chat),
    line(dayAt(2, '13:02:00'), 2_345_678n, chat),
    line(dayAt(3, '14:30:30'), 15_005n, messages),
    line(dayAt(4, '12:01:00'), 4_999n, running),
    // an online request: no batch's spend
    { ...line(dayAt(4, '12:02:00'), 7_000_000n, undefined), balanceAfter: 100_000_000n - 1_234_567n - 2_345_678n - 15_005n - 4_999n - 7_000_000n },
  ]);
  return { tenantId, emails, sessions, chat, messages, running, output, errors };
}

/** A tenant of 25 batches (25 minutes apart), for the paging: their ids oldest first. */
export async function manyBatches(db: pg.Pool, tenantId: string, n = 25): Promise<string[]> {
  const keyId = (await createApiKey(db, { tenantId, label: 'many' })).record.id;
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const at = new Date(Date.parse(dayAt(5, '12:00:00')) + i * 25 * 60000).toISOString();
    const id = batchId(at);
    await insertBatch(db, {
      id,
      tenantId,
      keyId,
      api: 'openai',
      endpoint: '/v1/chat/completions',
      status: 'completed',
      at,
      ended: at,
      total: 1,
      completed: 1,
      failed: 0,
    });
    ids.push(id);
  }
  return ids;
}

/** Batches still running, for "Cancelar": each with its input file (an OpenAI `batch` file, an Anthropic batch's requests). */
export interface RunningBatches {
  /** OpenAI chat batch in queue mode, `in_progress`: 4 lines, line 0 answered, line 1 claimed and running, lines 2 and 3 not started */
  queued: string;
  /** Anthropic message batch, `validating`: 2 requests */
  validating: string;
  /** OpenAI chat batch in vendor mode, `in_progress`: 3 lines, lines 0 and 1 at the vendor (batch `vb_<id>` of model vbatch/gpt), line 2 not submitted */
  vendor: string;
  /** the contents of the input files as stored */
  queuedInput: string;
  validatingInput: string;
}

export const QUEUED_INPUT = [0, 1, 2, 3]
  .map((i) =>
    JSON.stringify({
      custom_id: `q-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'sim/echo', messages: [{ role: 'user', content: `oi ${i}` }] },
    }),
  )
  .join('\n')
  .concat('\n');
/** an Anthropic batch's requests as the API keeps them (src/batch/message-batches.ts) */
export const MESSAGE_INPUT = ['m-a', 'm-b']
  .map((id) =>
    JSON.stringify({
      custom_id: id,
      method: 'POST',
      url: '/v1/messages',
      body: { model: 'sim/echo', max_tokens: 8, messages: [{ role: 'user', content: id }] },
    }),
  )
  .join('\n')
  .concat('\n');

export async function runningBatches(db: pg.Pool, tenantId: string): Promise<RunningBatches> {
  const keyId = (await createApiKey(db, { tenantId, label: 'running' })).record.id;
  const queued = batchId(dayAt(6, '09:00:00'));
  const validating = batchId(dayAt(6, '09:30:00'), 'msgbatch');
  const vendor = batchId(dayAt(6, '10:00:00'));
  const queuedFile = fileId();
  const messageFile = fileId();
  const vendorFile = fileId();
  for (const [id, purpose, content] of [
    [queuedFile, 'batch', QUEUED_INPUT],
    [messageFile, 'message_batch', MESSAGE_INPUT],
    [vendorFile, 'batch', QUEUED_INPUT.split('\n').slice(0, 3).join('\n').concat('\n')],
  ]) {
    await db.query(
      `insert into batch_files (id, tenant_id, key_id, purpose, filename, bytes, lines, content, expires_at)
       values ($1, $2, $3, $4, 'input.jsonl', $5, 1, $6, now() + interval '30 days')`,
      [id, tenantId, keyId, purpose, Buffer.byteLength(content), Buffer.from(content)],
    );
  }
  const running = (id: string, api: 'openai' | 'anthropic', endpoint: string, status: string, input: string, total: number, completed: number, mode: string) =>
    db.query(
      `insert into batches (id, tenant_id, key_id, input_file_id, endpoint, completion_window, status, total, completed, failed, created_at, in_progress_at,
                            expires_at, api, mode, vendor_next_at)
       values ($1, $2, $3, $4, $5, '24h', $6, $7, $8, 0, $9, case when $6 = 'in_progress' then $9::timestamptz end, now() + interval '1 day', $10, $11,
               case when $11 = 'vendor' then 'infinity'::timestamptz end)`,
      [id, tenantId, keyId, input, endpoint, status, total, completed, new Date(Number.parseInt(id.split('_')[1].slice(0, 12), 16)).toISOString(), api, mode],
    );
  await running(queued, 'openai', '/v1/chat/completions', 'in_progress', queuedFile, 4, 1, 'queue');
  await db.query(
    `insert into batch_results (batch_id, line, custom_id, request_id, status_code, body, error, ok) values
       ($1, 0, 'q-0', 'gen-q0', 200, '{"ok":0}', null, true),
       ($1, 1, 'q-1', 'gen-q1', null, null, null, null)`,
    [queued],
  );
  await running(validating, 'anthropic', '/v1/messages', 'validating', messageFile, 2, 0, 'queue');
  await running(vendor, 'openai', '/v1/chat/completions', 'in_progress', vendorFile, 3, 0, 'vendor');
  // lines 0 and 1 at the vendor (its batch vb_…), line 2 waiting for the next chunk
  await db.query(
    `insert into vendor_batch_chunks (batch_id, chunk, model_id, deployment, pool, lines, vendor_batch_id, vendor_status)
     values ($1, 0, 'vbatch/gpt', 'vbatch-gpt-1', 'openai', '{0,1}', $2, 'in_progress')`,
    [vendor, `vb_${vendor}`],
  );
  await db.query(`insert into batch_results (batch_id, line, custom_id, request_id) values ($1, 0, 'q-0', $2), ($1, 1, 'q-1', $3)`, [
    vendor,
    `gen-${vendor}-0`,
    `gen-${vendor}-1`,
  ]);
  return { queued, validating, vendor, queuedInput: QUEUED_INPUT, validatingInput: MESSAGE_INPUT };
}
