import { describe, expect, it } from 'vitest';
import { CatracaError } from '../errors.ts';
import { BatchFileIndex, newFileId, parseBatchFile, RunnableLineSchema, readUpload } from './files.ts';

const line = (custom_id: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id, method: 'POST', url: '/v1/chat/completions', body: { model: 'sim/echo', messages: [] }, ...extra });

function refusal(fn: () => unknown) {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CatracaError);
    return (err as CatracaError).toJSON().error;
  }
  throw new Error('not refused');
}

describe('parseBatchFile', () => {
  it('reads the request lines, skipping blank lines and CRLF', () => {
    const lines = parseBatchFile(Buffer.from(`${line('a')}\r\n\n${line('b')}\n`), 10);
    expect(lines.map((l) => l.custom_id)).toEqual(['a', 'b']);
    expect(lines[0]).toEqual({ custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: 'sim/echo', messages: [] } });
  });

  it('names the first line at fault', () => {
    expect(refusal(() => parseBatchFile(Buffer.from(`${line('a')}\n{oops\n`), 10))).toEqual({
      message: 'Line 2 is not valid JSON.',
      type: 'invalid_request_error',
      code: 'invalid_file',
      param: 'file',
    });
    expect(refusal(() => parseBatchFile(Buffer.from(line('a', { url: '/v1/images' })), 10)).message).toMatch(/^Line 1: /);
    expect(refusal(() => parseBatchFile(Buffer.from(line('a', { method: 'GET' })), 10)).message).toMatch(/^Line 1: /);
    expect(refusal(() => parseBatchFile(Buffer.from(line('a', { extra: 1 })), 10)).message).toMatch(/^Line 1: /);
    expect(refusal(() => parseBatchFile(Buffer.from(line('a', { body: [] })), 10)).message).toMatch(/^Line 1: /);
    expect(refusal(() => parseBatchFile(Buffer.from(`${line('a')}\n${line('a')}`), 10)).message).toBe("Line 2: custom_id 'a' is not unique in this file.");
    expect(refusal(() => parseBatchFile(Buffer.from('\n\n'), 10)).message).toBe('The file has no request lines.');
    expect(refusal(() => parseBatchFile(Buffer.from([0xff, 0xfe]), 10)).message).toBe('The file is not valid UTF-8.');
  });

  it('refuses more lines than the limit', () => {
    const three = [line('a'), line('b'), line('c')].join('\n');
    expect(parseBatchFile(Buffer.from(three), 3)).toHaveLength(3);
    expect(refusal(() => parseBatchFile(Buffer.from(three), 2))).toEqual({
      message: 'The file has more than 2 request lines (the limit of one batch).',
      type: 'invalid_request_error',
      code: 'too_many_lines',
      param: 'file',
    });
  });
});

describe('readUpload', () => {
  const multipart = async (form: FormData) => {
    const r = new Request('http://x/', { method: 'POST', body: form });
    return { body: Buffer.from(await r.arrayBuffer()), type: r.headers.get('content-type') ?? '' };
  };

  it('takes purpose and file from multipart/form-data', async () => {
    const form = new FormData();
    form.set('purpose', 'batch');
    form.set('file', new Blob([line('a')]), 'in.jsonl');
    const { body, type } = await multipart(form);
    const upload = await readUpload(body, type);
    expect(upload).toEqual({ purpose: 'batch', filename: 'in.jsonl', content: Buffer.from(line('a')), expiresAfterSeconds: null });
  });

  it("takes OpenAI's expires_after as the SDK sends it (expires_after[anchor], expires_after[seconds]); refuses one out of range", async () => {
    const form = new FormData();
    form.set('purpose', 'batch');
    form.set('expires_after[anchor]', 'created_at');
    form.set('expires_after[seconds]', '7200');
    form.set('file', new Blob([line('a')]), 'in.jsonl');
    let m = await multipart(form);
    expect((await readUpload(m.body, m.type)).expiresAfterSeconds).toBe(7200);
    form.set('expires_after[seconds]', '3599');
    m = await multipart(form);
    await expect(readUpload(m.body, m.type)).rejects.toMatchObject({ status: 400, param: 'expires_after.seconds' });
    form.set('expires_after[seconds]', '2592000');
    form.set('expires_after[anchor]', 'last_active_at');
    m = await multipart(form);
    await expect(readUpload(m.body, m.type)).rejects.toMatchObject({ status: 400, param: 'expires_after.anchor' });
  });

  it('refuses another purpose, a missing file, another content type', async () => {
    const form = new FormData();
    form.set('purpose', 'fine-tune');
    form.set('file', new Blob(['x']), 'a.jsonl');
    let m = await multipart(form);
    await expect(readUpload(m.body, m.type)).rejects.toMatchObject({ status: 400, param: 'purpose' });
    const noFile = new FormData();
    noFile.set('purpose', 'batch');
    m = await multipart(noFile);
    await expect(readUpload(m.body, m.type)).rejects.toMatchObject({ status: 400, param: 'file', message: "Missing required parameter: 'file'." });
    await expect(readUpload(Buffer.from('{}'), 'application/json')).rejects.toMatchObject({ status: 415, code: 'unsupported_media_type' });
  });
});

it('file ids sort by creation time', () => {
  const a = newFileId(1_700_000_000_000);
  const b = newFileId(1_700_000_000_001);
  expect(a).toMatch(/^file-[0-9a-f]{24}$/);
  expect(a < b).toBe(true);
});

describe('BatchFileIndex', () => {
  const line = (i: number, url = '/v1/chat/completions') =>
    JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url, body: { model: 'sim/echo', messages: [{ role: 'user', content: `é ${i}` }] } });

  it('reads each request line as parseBatchFile does: blank lines, CRLF and a last line without newline', () => {
    const content = Buffer.from(`${line(0)}\r\n\n  \n${line(1, '/v1/messages')}\n\t\r\n${line(2)}`);
    const index = new BatchFileIndex(content);
    expect(index.count).toBe(3);
    expect([0, 1, 2].map((i) => index.line(i))).toEqual(parseBatchFile(content, 10, RunnableLineSchema));
    expect(index.customIds()).toEqual(['req-0', 'req-1', 'req-2']);
    expect([index.line(3), index.line(-1), index.line(1.5)]).toEqual([null, null, null]);
  });

  it('a line that no longer parses is null, its custom_id by its place', () => {
    const index = new BatchFileIndex(Buffer.from(`${line(0)}\n{"custom_id": \n`));
    expect(index.count).toBe(2);
    expect(index.line(1)).toBeNull();
    expect(index.customIds()).toEqual(['req-0', 'line-2']);
  });
});
