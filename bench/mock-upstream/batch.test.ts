import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findBatch } from '../../src/providers/openai/batch.ts';
import { mockPromptTokens, startMockUpstream, type MockUpstream } from './server.ts';

// The mock's vendor batch APIs, judged by the official clients: OpenAI's Files + Batch API and
// Anthropic's Message Batches — statuses, the output and error files, the checks, the discount.
let mock: MockUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
beforeAll(async () => {
  mock = await startMockUpstream({ outputTokens: 6 });
  openai = new OpenAI({ baseURL: mock.url, apiKey: 'sk-mock-batch', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: mock.url.replace(/\/v1$/, ''), apiKey: 'sk-ant-mock-batch', maxRetries: 0 });
});
afterAll(async () => {
  await mock.close();
});

const line = (id: string, model: string, text: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: text }], ...extra } });

async function until<T>(read: () => Promise<T>, done: (t: T) => boolean): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const t = await read();
    if (done(t)) return t;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('not done');
}

describe('mock vendor: OpenAI Batch API', () => {
  it('runs a file of lines: completed, an output file and an error file, the usage billed at 50 %', async () => {
    const before = { ...mock.stats.batch };
    const text = [line('a', 'mock-gpt', 'one two three'), line('b', 'mock-gpt', 'four five', { max_tokens: 2 }), line('c', 'mock-gpt', 'x', { bogus: 1 })].join(
      '\n',
    );
    const file = await openai.files.create({ file: await toFile(Buffer.from(text), 'in.jsonl'), purpose: 'batch' });
    expect(file).toMatchObject({ object: 'file', purpose: 'batch', bytes: Buffer.byteLength(text), status: 'processed' });
    const created = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    expect(created.status).toBe('validating');
    const done = await until(
      () => openai.batches.retrieve(created.id),
      (b) => b.status === 'completed',
    );
    expect(done.request_counts).toEqual({ total: 3, completed: 2, failed: 1 });
    const out = (await (await openai.files.content(done.output_file_id!)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(out.map((l) => [l.custom_id, l.response.status_code, l.response.body.usage.completion_tokens])).toEqual([
      ['a', 200, 6],
      ['b', 200, 2],
    ]);
    const err = (await (await openai.files.content(done.error_file_id!)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(err.map((l) => [l.custom_id, l.response.status_code, l.response.body.error.message])).toEqual([
      ['c', 400, 'Unrecognized request argument supplied: bogus'],
    ]);
    const prompt = ['one two three', 'four five'].map((t) => mockPromptTokens({ messages: [{ role: 'user', content: t }] })).reduce((a, b) => a + b);
    expect(mock.stats.batch.succeeded - before.succeeded).toBe(2);
    expect(mock.stats.batch.prompt_tokens - before.prompt_tokens).toBe(prompt);
    expect(mock.stats.batch.completion_tokens - before.completion_tokens).toBe(8);
    expect(mock.stats.batch.billed_completion_tokens - before.billed_completion_tokens).toBe(4);
    expect(mock.stats.batch.billed_prompt_tokens - before.billed_prompt_tokens).toBe(prompt / 2);
  });

  it('fails a batch in validating for a duplicate custom_id, a mismatched endpoint or two models', async () => {
    const cases: Array<[string, string]> = [
      [[line('a', 'mock-gpt', 'x'), line('a', 'mock-gpt', 'y')].join('\n'), 'duplicate_custom_id'],
      [JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: 'x' } }), 'mismatched_endpoint'],
      [[line('a', 'mock-gpt', 'x'), line('b', 'other', 'y')].join('\n'), 'mismatched_model'],
    ];
    for (const [text, code] of cases) {
      const file = await openai.files.create({ file: await toFile(Buffer.from(text), 'in.jsonl'), purpose: 'batch' });
      const b = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      const done = await until(
        () => openai.batches.retrieve(b.id),
        (x) => x.status !== 'validating',
      );
      expect([done.status, done.errors?.data?.[0]?.code]).toEqual(['failed', code]);
    }
  });

  it("refuses another key's file and batch, and a request without a key", async () => {
    const file = await openai.files.create({ file: await toFile(Buffer.from(line('a', 'mock-gpt', 'x')), 'in.jsonl'), purpose: 'batch' });
    const other = new OpenAI({ baseURL: mock.url, apiKey: 'sk-other', maxRetries: 0 });
    await expect(other.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
    await expect(other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toMatchObject({
      status: 404,
    });
    const r = await fetch(`${mock.url}/batches`, { method: 'POST', body: '{}' });
    expect(r.status).toBe(401);
  });

  it('cancels: cancelling, then cancelled with the output of the lines that ran', async () => {
    mock.batchTiming.lineMs = 150;
    try {
      const text = Array.from({ length: 6 }, (_, i) => line(`l${i}`, 'mock-gpt', `n ${i}`)).join('\n');
      const file = await openai.files.create({ file: await toFile(Buffer.from(text), 'in.jsonl'), purpose: 'batch' });
      const b = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await until(
        () => openai.batches.retrieve(b.id),
        (x) => x.request_counts!.completed >= 2,
      );
      expect((await openai.batches.cancel(b.id)).status).toBe('cancelling');
      const done = await until(
        () => openai.batches.retrieve(b.id),
        (x) => x.status === 'cancelled',
      );
      const ran = done.request_counts!.completed;
      expect(ran).toBeGreaterThanOrEqual(2);
      expect(ran).toBeLessThan(6);
      const out = (await (await openai.files.content(done.output_file_id!)).text()).trim().split('\n');
      expect(out.length).toBe(ran);
    } finally {
      mock.batchTiming.lineMs = 0;
    }
  });
});

describe('mock vendor: OpenAI batches listed with their metadata', () => {
  it("lists the key's batches newest first in pages (the SDK pages through them), each with its metadata; refuses bad metadata; findBatch finds one by it", async () => {
    const key = `sk-mock-list-${Math.random().toString(36).slice(2, 8)}`;
    const client = new OpenAI({ baseURL: mock.url, apiKey: key, maxRetries: 0 });
    const file = await client.files.create({ file: await toFile(Buffer.from(`${line('a', 'mock-gpt', 'hi')}\n`), 'in.jsonl'), purpose: 'batch' });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const b = await client.batches.create({
        input_file_id: file.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        metadata: { catraca_chunk: `batch_x:${i}` },
      });
      expect(b.metadata).toEqual({ catraca_chunk: `batch_x:${i}` });
      ids.push(b.id);
    }
    const first = await client.batches.list({ limit: 2 });
    expect(first.data.map((b) => b.id)).toEqual([ids[4], ids[3]]);
    expect(first.has_more).toBe(true);
    const all = [];
    for await (const b of await client.batches.list({ limit: 2 })) all.push([b.id, b.metadata?.catraca_chunk]);
    expect(all).toEqual([...ids.keys()].reverse().map((i) => [ids[i], `batch_x:${i}`]));
    // another key sees none of them
    expect((await openai.batches.list({ limit: 100 })).data.filter((b) => ids.includes(b.id))).toEqual([]);
    const refused = await client.batches
      .create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { ['k'.repeat(65)]: 'v' } })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect([refused?.status, (refused?.error as { param?: string } | undefined)?.param]).toEqual([400, 'metadata']);
    // the worker's look-up: by metadata, through pages, down to `since`
    const since = Math.floor(Date.now() / 1000) - 60;
    expect((await findBatch(mock.url, key, { key: 'catraca_chunk', value: 'batch_x:0', since }))?.id).toBe(ids[0]);
    expect(await findBatch(mock.url, key, { key: 'catraca_chunk', value: 'batch_x:9', since })).toBeNull();
  });
});

describe('mock vendor: Anthropic Message Batches', () => {
  it('runs requests: in_progress, then ended; results succeeded and errored; custom_id checked', async () => {
    const b = await anthropic.messages.batches.create({
      requests: [
        { custom_id: 'ok-1', params: { model: 'claude-mock', max_tokens: 5, messages: [{ role: 'user', content: 'hello there' }] } },
        { custom_id: 'bad-1', params: { model: 'claude-mock', messages: [{ role: 'user', content: 'no max tokens' }] } as never },
      ],
    });
    expect(b.processing_status).toBe('in_progress');
    const done = await until(
      () => anthropic.messages.batches.retrieve(b.id),
      (x) => x.processing_status === 'ended',
    );
    expect(done.request_counts).toEqual({ processing: 0, succeeded: 1, errored: 1, canceled: 0, expired: 0 });
    const results = [];
    for await (const r of await anthropic.messages.batches.results(b.id)) results.push(r);
    expect(results.map((r) => [r.custom_id, r.result.type])).toEqual([
      ['ok-1', 'succeeded'],
      ['bad-1', 'errored'],
    ]);
    await expect(
      anthropic.messages.batches.create({ requests: [{ custom_id: 'has space', params: { model: 'm', max_tokens: 1, messages: [] } }] }),
    ).rejects.toMatchObject({ status: 400 });
  });
});
