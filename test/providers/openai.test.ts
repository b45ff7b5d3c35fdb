import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MOCK_SPLIT_ERROR, MOCK_SPLIT_TEXT, startMockUpstream, type MockUpstream } from '../../bench/mock-upstream/server.ts';
import type { Job } from '../../src/bus/messages.ts';
import type { Frame } from '../../src/bus/frames.ts';
import { subjects } from '../../src/bus/subjects.ts';
import { loadConfig } from '../../src/config.ts';
import { configureLogging } from '../../src/log.ts';
import { deltas, makeJob, natsUrl, sendJob, testCatalog, uniquePool, usageOf, waitFor } from '../helpers/worker.ts';
import { startWorker, type WorkerHandle } from '../../workers/worker.ts';
import { estimatePromptTokens, estimateTokens } from '../../src/providers/shared/estimate.ts';
import { createRegistry } from '../../src/providers/registry.ts';

// The OpenAI-compatible adapter inside a real worker on real NATS, against the mock vendor.
const KEY = 'sk-catraca-test-9f8e7d6c5b4a39281706f5e4d3c2b1a0';
const KEY_ENV = 'CATRACA_TEST_UPSTREAM_KEY';

let mock: MockUpstream;
let nc: NatsConnection;
let w: WorkerHandle;
let pool: string;
const logged: string[] = [];
const seenFrames: Frame[] = [];

beforeAll(async () => {
  // Every log line of this process (JSON, at least info) is captured for the secret check below.
  configureLogging({ format: 'json', level: 'info', write: (line) => void logged.push(line) });
  mock = await startMockUpstream({ outputTokens: 16 });
  nc = await connect({ servers: natsUrl() });
  pool = uniquePool();
  const config = loadConfig({ NATS_URL: natsUrl(), UPSTREAM_TIMEOUT_MS: '3000', UPSTREAM_CONNECT_TIMEOUT_MS: '1000' });
  w = await startWorker({
    pools: [pool],
    natsUrl: natsUrl(),
    config,
    keepaliveMs: 60_000,
    registry: createRegistry(config, { [KEY_ENV]: KEY }),
    catalog: testCatalog,
  });
});

afterAll(async () => {
  await w?.stop();
  await nc?.drain();
  await mock?.close();
  configureLogging({ format: undefined, level: undefined, write: undefined });
  // The upstream key reached the vendor and nowhere else: no frame, no log line.
  const everything = JSON.stringify(seenFrames) + logged.join('');
  expect(everything).not.toContain(KEY);
  expect(everything).not.toContain(KEY.slice(0, 12));
  expect(logged.some((l) => l.includes('"code":"upstream_auth_failed"'))).toBe(true); // logs were captured
});

function job(upstream_model: string, { upstream, ...over }: Parameters<typeof makeJob>[1] = {}): Job {
  return makeJob(pool, {
    upstream: {
      id: `mock/${upstream_model}`,
      protocol: 'openai',
      upstream_model,
      base_url: mock.url,
      api_key_env: KEY_ENV,
      extra_params: ['mock'],
      ...upstream,
    },
    body: {
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello to the world' },
      ],
    },
    ...over,
  });
}

async function frames(j: Job): Promise<Frame[]> {
  const run = await sendJob(nc, pool, j);
  expect(run.ack).toEqual({ ok: true, worker: w.id });
  const f = await run.frames;
  seenFrames.push(...f);
  return f;
}

describe('openai-compatible adapter against the mock vendor', () => {
  it('streams deltas and ends with the upstream usage; sends the key and only allowed fields', async () => {
    const j = job('mock-gpt', {
      body: {
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Say hello to the world' },
        ],
        temperature: 0.2,
        vendor_specific: { x: 1 },
        provider: { order: ['x'] },
        max_tokens: 9999,
        sim: { first_token_ms: 5 },
      },
      max_tokens: 5,
    });
    const f = await frames(j);
    // deltas that arrive in one socket read are merged into one frame (coalesceDeltas), so the
    // number of frames depends on the vendor's writes; the text, the order and the seqs do not
    expect(deltas(f).join('')).toBe('Hello world foo bar baz');
    expect(f.map((x) => x.seq)).toEqual(f.map((_, i) => i));
    expect(f.at(-1)).toEqual({ t: 'done', finish_reason: 'length', usage: { prompt_tokens: 16, completion_tokens: 5 }, estimated: false, seq: f.length - 1 });
    expect(mock.stats.lastAuthorization).toBe(`Bearer ${KEY}`);
    expect(mock.stats.lastBody).toEqual({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello to the world' },
      ],
      temperature: 0.2,
      max_tokens: 5,
      model: 'mock-gpt',
      stream: true,
      stream_options: { include_usage: true },
    });
    const { msg, count } = await usageOf(nc, pool, j.request_id);
    expect(count).toBe(1);
    expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens, msg.estimated, msg.model]).toEqual(['completed', 16, 5, false, 'mock/mock-gpt']);
  });

  it('keeps max_completion_tokens when the client used it (never both)', async () => {
    await frames(job('mock-gpt', { body: { messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 50 }, max_tokens: 3 }));
    expect(mock.stats.lastBody).toMatchObject({ max_completion_tokens: 3 });
    expect(mock.stats.lastBody).not.toHaveProperty('max_tokens');
  });

  it('upstream 429 → error frame 429 upstream_rate_limited with retry_after, nothing billed', async () => {
    const j = job('mock-429');
    expect(await frames(j)).toEqual([
      {
        t: 'error',
        status: 429,
        code: 'upstream_rate_limited',
        message: 'The upstream provider is rate limiting requests; retry after 1 s.',
        usage: { prompt_tokens: 0, completion_tokens: 0 },
        retry_after: 1,
        seq: 0,
      },
    ]);
    const { msg } = await usageOf(nc, pool, j.request_id);
    expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens]).toEqual(['error', 0, 0]);
  });

  it('maps 401, 404, 400 and 500 without leaking upstream secrets', async () => {
    const e401 = (await frames(job('mock-401')))[0];
    expect(e401).toMatchObject({ t: 'error', status: 502, code: 'upstream_auth_failed' });
    expect(JSON.stringify(e401)).not.toContain('sk-ca');
    expect((await frames(job('mock-404')))[0]).toMatchObject({ t: 'error', status: 502, code: 'upstream_model_not_found' });
    expect((await frames(job('mock-400')))[0]).toMatchObject({
      t: 'error',
      status: 400,
      code: 'upstream_bad_request',
      message: "Invalid 'max_tokens': integer below minimum value.",
    });
    expect((await frames(job('mock-500')))[0]).toMatchObject({
      t: 'error',
      status: 502,
      code: 'upstream_error',
      message: 'The upstream provider failed (HTTP 500).',
    });
  });

  it('a stream cut mid-way → deltas, then error 502 upstream_stream_interrupted with estimated partial usage', async () => {
    const j = job('mock-fail-midstream');
    const f = await frames(j);
    expect(deltas(f).join('')).toBe('Hello world foo');
    const prompt = await estimatePromptTokens(j.body.messages);
    const completion = await estimateTokens('Hello world foo');
    expect([prompt, completion]).toEqual([19, 3]);
    expect(f.at(-1)).toEqual({
      t: 'error',
      status: 502,
      code: 'upstream_stream_interrupted',
      message: 'The upstream stream was interrupted before it finished.',
      usage: { prompt_tokens: 19, completion_tokens: 3 },
      seq: f.length - 1,
    });
    const { msg } = await usageOf(nc, pool, j.request_id);
    expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens, msg.estimated]).toEqual(['error', 19, 3, true]);
  });

  it('an upstream without usage → done with a tiktoken estimate, estimated: true', async () => {
    const j = job('mock-no-usage', { max_tokens: 4 });
    const f = await frames(j);
    expect(deltas(f).join('')).toBe('Hello world foo bar');
    expect(f.at(-1)).toEqual({ t: 'done', finish_reason: 'length', usage: { prompt_tokens: 19, completion_tokens: 4 }, estimated: true, seq: f.length - 1 });
    expect((await usageOf(nc, pool, j.request_id)).msg.estimated).toBe(true);
  });

  it('missing key env → 502 upstream_not_configured; unreachable vendor → 502 upstream_unreachable', async () => {
    expect((await frames(job('mock-gpt', { upstream: { id: 'mock/unset-key', api_key_env: 'CATRACA_TEST_NOT_SET' } })))[0]).toMatchObject({
      t: 'error',
      status: 502,
      code: 'upstream_not_configured',
    });
    const closed = await startMockUpstream();
    const deadUrl = closed.url;
    await closed.close();
    expect((await frames(job('mock-gpt', { upstream: { id: 'mock/dead', base_url: deadUrl } })))[0]).toMatchObject({
      t: 'error',
      status: 502,
      code: 'upstream_unreachable',
      message: 'The upstream provider could not be reached (ECONNREFUSED).',
    });
  });

  it('cancel closes the upstream connection and bills the estimate of what was generated', async () => {
    const aborted = mock.stats.aborted;
    const j = job('mock-slow', { max_tokens: 100, body: { ...job('x').body, mock: { output_tokens: 100 } } });
    const run = await sendJob(nc, pool, j);
    await waitFor(() => run.seen.filter((f) => f.t === 'delta').length >= 2);
    nc.publish(subjects.cancel(w.id, j.request_id));
    const f = await run.frames;
    seenFrames.push(...f);
    const text = deltas(f).join('');
    expect(f.at(-1)).toMatchObject({ t: 'error', code: 'request_cancelled', usage: { prompt_tokens: 19, completion_tokens: await estimateTokens(text) } });
    await waitFor(() => mock.stats.aborted === aborted + 1);
    expect((await usageOf(nc, pool, j.request_id)).msg.outcome).toBe('cancelled');
  });

  it('decodes answers and error bodies once: a character split across two reads arrives intact', async () => {
    const ok = await frames(job('mock-split-utf8'));
    expect(deltas(ok).join('')).toBe(MOCK_SPLIT_TEXT);
    expect(ok.at(-1)).toMatchObject({ t: 'done', finish_reason: 'stop', usage: { prompt_tokens: 16, completion_tokens: 3 } });
    expect((await frames(job('mock-400-utf8')))[0]).toMatchObject({ t: 'error', status: 400, code: 'upstream_bad_request', message: MOCK_SPLIT_ERROR });
  });

  it('a cancel before the first token bills the estimated prompt: the vendor was already reading it', async () => {
    const j = job('mock-slow', { max_tokens: 100 }); // 500 ms to the first token
    const run = await sendJob(nc, pool, j);
    await new Promise((r) => setTimeout(r, 150));
    nc.publish(subjects.cancel(w.id, j.request_id));
    const f = await run.frames;
    seenFrames.push(...f);
    expect(deltas(f)).toEqual([]);
    expect(f.at(-1)).toMatchObject({ t: 'error', code: 'request_cancelled', usage: { prompt_tokens: 19, completion_tokens: 0 } });
    const { msg } = await usageOf(nc, pool, j.request_id);
    expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens, msg.estimated]).toEqual(['cancelled', 19, 0, true]);
  });

  it('a vendor that refuses the request before reading it bills nothing (429, 400)', async () => {
    const j = job('mock-400');
    await frames(j);
    const { msg } = await usageOf(nc, pool, j.request_id);
    expect([msg.outcome, msg.prompt_tokens, msg.completion_tokens]).toEqual(['error', 0, 0]);
  });

  it('overall timeout → 504 upstream_timeout', async () => {
    // mock-slow: 500 ms to the first token, then 20 tokens/s; 100 tokens take ~5.5 s > 3 s.
    const j = job('mock-slow', { max_tokens: 100, body: { ...job('x').body, mock: { output_tokens: 100 } } });
    const f = await frames(j);
    expect(f.at(-1)).toMatchObject({ t: 'error', status: 504, code: 'upstream_timeout' });
  }, 10_000);
});
