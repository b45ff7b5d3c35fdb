import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type TestStack } from './helpers/stack.ts';

// OpenAI's Files API (POST/GET /v1/files, GET/DELETE /v1/files/{id}, GET …/content) through the
// front door with the real `openai` SDK: uploads of batch JSONL, their limits (file size, lines)
// in OpenAI's error shape, per-tenant isolation, the list's cursor, and expiry
// (BATCH_RETENTION_DAYS, metering's sweeper). Nothing here is charged: the balance stays as granted.

const MAX_BYTES = 100_000;
const MAX_LINES = 1000;

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ env: { FILES_MAX_BYTES: String(MAX_BYTES), BATCH_MAX_LINES: String(MAX_LINES), BATCH_RETENTION_DAYS: '7' } });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

const clientOf = (key: string) => new OpenAI({ baseURL: stack.baseUrl, apiKey: key, maxRetries: 0 });

const chatLine = (i: number) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'sim/echo', messages: [{ role: 'user', content: `hello ${i}` }] },
  });

const jsonl = (n: number, line = chatLine) => `${Array.from({ length: n }, (_, i) => line(i)).join('\n')}\n`;

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (err) {
    const e = err as InstanceType<typeof OpenAI.APIError>;
    return { status: e.status, error: e.error };
  }
  throw new Error('not refused');
}

describe('Files API', () => {
  it('uploads a batch JSONL, reads it back, lists it, deletes it', async () => {
    const t = await stack.tenant('10');
    const client = clientOf(t.key);
    const content = jsonl(300);
    const before = Math.floor(Date.now() / 1000);
    const file = await client.files.create({ file: await toFile(Buffer.from(content), 'lines.jsonl'), purpose: 'batch' });
    expect(file).toEqual({
      id: expect.stringMatching(/^file-[0-9a-f]{24}$/),
      object: 'file',
      bytes: Buffer.byteLength(content),
      created_at: expect.any(Number),
      expires_at: file.created_at + 7 * 86400,
      filename: 'lines.jsonl',
      purpose: 'batch',
      status: 'processed',
      status_details: null,
    });
    expect(file.created_at).toBeGreaterThanOrEqual(before - 1);
    const row = (await stack.db.query('select tenant_id, key_id, lines from batch_files where id = $1', [file.id])).rows[0];
    expect(row).toEqual({ tenant_id: t.tenantId, key_id: t.keyId, lines: 300 });

    expect(await client.files.retrieve(file.id)).toEqual(file);
    const downloaded = await client.files.content(file.id);
    expect(downloaded.headers.get('content-type')).toBe('application/jsonl');
    expect(await downloaded.text()).toBe(content);

    const list = await client.files.list();
    expect(list.data).toEqual([file]);
    expect(list.has_more).toBe(false);

    expect(await client.files.delete(file.id)).toEqual({ id: file.id, object: 'file', deleted: true });
    expect(await refusal(client.files.retrieve(file.id))).toEqual({
      status: 404,
      error: { message: `No such File object: ${file.id}`, type: 'invalid_request_error', code: 'file_not_found', param: 'id' },
    });
    expect((await refusal(client.files.delete(file.id))).status).toBe(404);
    expect((await refusal(client.files.content(file.id))).status).toBe(404);
    // nothing charged
    const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [t.tenantId]);
    expect(rows[0].balance_micros).toBe(10_000_000n);
  });

  it("another tenant's file is not found, and not listed", async () => {
    const a = await stack.tenant('1');
    const b = await stack.tenant('1');
    const file = await clientOf(a.key).files.create({ file: await toFile(Buffer.from(jsonl(2)), 'a.jsonl'), purpose: 'batch' });
    expect((await refusal(clientOf(b.key).files.retrieve(file.id))).status).toBe(404);
    expect((await refusal(clientOf(b.key).files.content(file.id))).status).toBe(404);
    expect((await refusal(clientOf(b.key).files.delete(file.id))).status).toBe(404);
    expect((await clientOf(b.key).files.list()).data).toEqual([]);
    expect((await clientOf(a.key).files.retrieve(file.id)).id).toBe(file.id);
  });

  it('pages the list with after and limit, newest first', async () => {
    const t = await stack.tenant('1');
    const client = clientOf(t.key);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await client.files.create({ file: await toFile(Buffer.from(jsonl(1)), `f${i}.jsonl`), purpose: 'batch' })).id);
    const newest = [...ids].reverse();
    const first = await client.files.list({ limit: 2 });
    expect(first.data.map((f) => f.id)).toEqual(newest.slice(0, 2));
    expect(first.has_more).toBe(true);
    const all: string[] = [];
    for await (const f of client.files.list({ limit: 2 })) all.push(f.id);
    expect(all).toEqual(newest);
    const asc = await client.files.list({ order: 'asc', after: ids[2] });
    expect(asc.data.map((f) => f.id)).toEqual(ids.slice(3));
    expect(asc.has_more).toBe(false);
  });

  it('refuses a bad line, too many lines, a file over the size limit, another purpose', async () => {
    const t = await stack.tenant('1');
    const client = clientOf(t.key);
    const bad = `${chatLine(0)}\n${JSON.stringify({ custom_id: 'x', method: 'POST', url: '/v1/images/generations', body: {} })}\n`;
    expect(await refusal(client.files.create({ file: await toFile(Buffer.from(bad), 'bad.jsonl'), purpose: 'batch' }))).toEqual({
      status: 400,
      error: {
        message: expect.stringMatching(/^Line 2: .*url/),
        type: 'invalid_request_error',
        code: 'invalid_file',
        param: 'file',
      },
    });
    const short = (i: number) => JSON.stringify({ custom_id: String(i), method: 'POST', url: '/v1/embeddings', body: {} });
    expect(await refusal(client.files.create({ file: await toFile(Buffer.from(jsonl(MAX_LINES + 1, short)), 'many.jsonl'), purpose: 'batch' }))).toEqual({
      status: 400,
      error: {
        message: `The file has more than ${MAX_LINES} request lines (the limit of one batch).`,
        type: 'invalid_request_error',
        code: 'too_many_lines',
        param: 'file',
      },
    });
    expect((await client.files.create({ file: await toFile(Buffer.from(jsonl(MAX_LINES, short)), 'max.jsonl'), purpose: 'batch' })).bytes).toBeLessThan(
      MAX_BYTES,
    );
    const big = Buffer.from(`${JSON.stringify({ custom_id: 'big', method: 'POST', url: '/v1/embeddings', body: { input: 'x'.repeat(MAX_BYTES) } })}\n`);
    expect(await refusal(client.files.create({ file: await toFile(big, 'big.jsonl'), purpose: 'batch' }))).toEqual({
      status: 413,
      error: { message: `Request body exceeds the limit of ${MAX_BYTES} bytes.`, type: 'invalid_request_error', code: 'request_too_large', param: null },
    });
    expect(await refusal(client.files.create({ file: await toFile(Buffer.from(jsonl(1)), 'ft.jsonl'), purpose: 'fine-tune' }))).toEqual({
      status: 400,
      error: {
        message: "Invalid value for 'purpose': 'fine-tune'; this gateway takes files for 'batch' only.",
        type: 'invalid_request_error',
        code: 'invalid_request',
        param: 'purpose',
      },
    });
    const { rows } = await stack.db.query('select count(*)::int as n from batch_files where tenant_id = $1', [t.tenantId]);
    expect(rows[0].n).toBe(1);
  });

  it('refuses an unknown key, storing nothing', async () => {
    // a name of this test's own: other files store batch files in the same database meanwhile
    const name = `refused-${Math.random().toString(36).slice(2)}.jsonl`;
    const unknown = clientOf(`sk-cat-v1-${'0'.repeat(64)}`);
    // the SDK streams its multipart body: refused before it ended, its connection was reset (CI saw
    // "Connection error." where the 401 belonged); every try reads the 401, the first from the
    // database's lookup, the rest from the negative cache
    for (let i = 0; i < 20; i++) {
      expect(await refusal(unknown.files.create({ file: await toFile(Buffer.from(jsonl(1)), name), purpose: 'batch' }))).toEqual({
        status: 401,
        error: { message: 'Invalid API key.', type: 'authentication_error', code: 'invalid_api_key', param: null },
      });
    }
    expect((await refusal(unknown.files.list())).status).toBe(401);
    expect((await stack.db.query('select count(*)::int as n from batch_files where filename = $1', [name])).rows[0].n).toBe(0);
  });

  it('an expired file is gone at once, and the sweeper deletes it', async () => {
    const t = await stack.tenant('1');
    const client = clientOf(t.key);
    const file = await client.files.create({ file: await toFile(Buffer.from(jsonl(1)), 'old.jsonl'), purpose: 'batch' });
    await stack.db.query("update batch_files set expires_at = now() - interval '1 second' where id = $1", [file.id]);
    expect((await refusal(client.files.retrieve(file.id))).status).toBe(404);
    expect((await client.files.list()).data).toEqual([]);
    const deadline = Date.now() + 10_000;
    let left = 1;
    while (left > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      left = (await stack.db.query('select count(*)::int as n from batch_files where id = $1', [file.id])).rows[0].n;
    }
    expect(left).toBe(0);
  });
});
