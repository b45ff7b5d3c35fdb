import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import OpenAI from 'openai';
import { startStack, SIM_PRICES, type TestStack } from './helpers/stack.ts';
import { costMicros } from '../src/billing/money.ts';
import { revokeKey } from '../src/db/keys.ts';
import { upsertModel } from '../src/db/models.ts';
import { encode } from '../src/bus/messages.ts';
import { subjects } from '../src/bus/subjects.ts';

// sim token counting (README): a token is /\s*\S+/; prompt = Σ(3 + tokens(content)) + 3.
const simTokens = (text: string) => (text.match(/\s*\S+/g) ?? []).length;
const simPrompt = (messages: { content: string }[]) => messages.reduce((n, m) => n + 3 + simTokens(m.content), 0) + 3;

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({ gateways: 2, workers: 1 });
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

async function balanceOf(tenantId: string): Promise<bigint> {
  const { rows } = await stack.db.query('select balance_micros from tenants where id = $1', [tenantId]);
  return rows[0].balance_micros;
}

describe('chat completions through the whole path', () => {
  it('answers non-streamed sim/echo in the OpenAI shape and debits the exact cost', async () => {
    const t = await stack.tenant('10.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const messages = [{ role: 'user' as const, content: 'Olá, catraca! Quanto custa?' }];
    const res = await client.chat.completions.create({ model: 'sim/echo', messages }).withResponse();
    const completion = res.data;
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('sim/echo');
    expect(completion.choices).toHaveLength(1);
    expect(completion.choices[0].message).toMatchObject({ role: 'assistant', content: 'Olá, catraca! Quanto custa?' });
    expect(completion.choices[0].finish_reason).toBe('stop');
    const prompt = simPrompt(messages);
    expect(completion.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 4, total_tokens: prompt + 4 });
    const cost = costMicros(prompt, 4, SIM_PRICES.echo);
    expect((completion.usage as unknown as { cost: number }).cost).toBe(Number(cost) / 1e6);
    const requestId = res.response.headers.get('x-request-id')!;
    expect(requestId).toBe(completion.id);
    await stack.waitSettled([requestId]);
    expect(await balanceOf(t.tenantId)).toBe(10_000_000n - cost);
    await stack.waitNoHolds(t.tenantId);
  });

  it('streams role, content chunks, finish, usage chunk and [DONE]', async () => {
    const t = await stack.tenant('10.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const text = 'one two three four five';
    const stream = await client.chat.completions.create({
      model: 'sim/echo',
      messages: [{ role: 'user', content: text }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const contents = chunks.slice(1, -2).map((c) => c.choices[0].delta.content);
    expect(contents).toEqual(['one', ' two', ' three', ' four', ' five']);
    const finish = chunks[chunks.length - 2];
    expect(finish.choices[0].finish_reason).toBe('stop');
    const usageChunk = chunks[chunks.length - 1];
    expect(usageChunk.choices).toEqual([]);
    const prompt = simPrompt([{ content: text }]);
    expect(usageChunk.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 5, total_tokens: prompt + 5 });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('ends the raw SSE body with data: [DONE] and omits usage without include_usage', async () => {
    const t = await stack.tenant('1.00');
    const res = await fetch(`${stack.baseUrl}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/echo', stream: true, messages: [{ role: 'user', content: 'a b' }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const body = await res.text();
    const events = body.split('\n\n').filter(Boolean);
    expect(events[events.length - 1]).toBe('data: [DONE]');
    expect(events).toHaveLength(5); // role, "a", " b", finish, [DONE]
    expect(body).not.toContain('"usage"');
  });

  it('debits exactly the sum of documented costs after N requests', async () => {
    const t = await stack.tenant('5.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const ids: string[] = [];
    let expected = 0n;
    for (let i = 1; i <= 12; i++) {
      const content = Array.from({ length: i }, (_, j) => `w${j}`).join(' ');
      const model = i % 2 ? 'sim/echo' : 'sim/lorem';
      const res = await client.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens: 20 }).withResponse();
      ids.push(res.response.headers.get('x-request-id')!);
      const u = res.data.usage!;
      expect(u.prompt_tokens).toBe(simPrompt([{ content }]));
      if (model === 'sim/echo') expect(u.completion_tokens).toBe(i);
      expected += costMicros(u.prompt_tokens, u.completion_tokens, model === 'sim/echo' ? SIM_PRICES.echo : SIM_PRICES.lorem);
    }
    await stack.waitSettled(ids);
    expect(await balanceOf(t.tenantId)).toBe(5_000_000n - expected);
    const { rows } = await stack.db.query("select coalesce(sum(amount_micros),0)::bigint as debits from ledger where tenant_id = $1 and kind = 'debit'", [
      t.tenantId,
    ]);
    expect(rows[0].debits).toBe(expected);
    const credits = await fetch(`${stack.baseUrl}/credits`, { headers: { authorization: `Bearer ${t.key}` } }).then((r) => r.json());
    expect(credits.data).toMatchObject({
      total_credits: 5,
      total_usage: Number(expected) / 1e6,
      balance: Number(5_000_000n - expected) / 1e6,
      currency: 'BRL',
    });
  });

  it('reports the key in the OpenRouter key schema, in BRL', async () => {
    const t = await stack.tenant('3.00', { label: 'agent-x', models: ['sim/echo'], limitMicros: 2_000_000n, limitReset: 'daily' });
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: 'x y z' }] }).withResponse();
    await stack.waitSettled([res.response.headers.get('x-request-id')!]);
    const cost = costMicros(simPrompt([{ content: 'x y z' }]), 3, SIM_PRICES.echo);
    const key = await fetch(`${stack.baseUrl}/key`, { headers: { authorization: `Bearer ${t.key}` } }).then((r) => r.json());
    expect(key.data).toMatchObject({
      label: 'agent-x',
      limit: 2,
      limit_remaining: Number(2_000_000n - cost) / 1e6,
      limit_reset: 'daily',
      usage: Number(cost) / 1e6,
      usage_daily: Number(cost) / 1e6,
      usage_weekly: Number(cost) / 1e6,
      usage_monthly: Number(cost) / 1e6,
      is_free_tier: false,
      allowed_models: ['sim/echo'],
      max_concurrent: null,
      tpm: null,
      end_user_limit: null,
      currency: 'BRL',
    });
    expect(JSON.stringify(key)).not.toContain(t.key);
  });

  it('reports what a request was billed on GET /generation, to its own tenant only', async () => {
    const t = await stack.tenant('1.00');
    const other = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const res = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'um dois três' }], user: 'cliente-42' })
      .withResponse();
    const id = res.response.headers.get('x-request-id')!;
    await stack.waitSettled([id]);
    const prompt = simPrompt([{ content: 'um dois três' }]);
    const cost = Number(costMicros(prompt, 3, SIM_PRICES.echo)) / 1e6;
    const get = (key: string, q: string) => fetch(`${stack.baseUrl}/generation${q}`, { headers: { authorization: `Bearer ${key}` } });
    const mine = await get(t.key, `?id=${id}`);
    expect(mine.status).toBe(200);
    expect((await mine.json()).data).toMatchObject({
      id,
      model: 'sim/echo',
      total_cost: cost,
      usage: cost,
      tokens_prompt: prompt,
      tokens_completion: 3,
      native_tokens_cached: 0,
      native_tokens_reasoning: 0,
      api_type: 'chat',
      user: 'cliente-42',
      estimated: false,
      cancelled: false,
      currency: 'BRL',
    });
    const theirs = await get(other.key, `?id=${id}`);
    expect(theirs.status).toBe(404);
    expect((await theirs.json()).error).toMatchObject({ type: 'not_found_error', code: 'generation_not_found', param: 'id' });
    const missing = await get(t.key, '');
    expect(missing.status).toBe(400);
    expect((await missing.json()).error).toMatchObject({ code: 'invalid_request', param: 'id' });
  });

  it("reports the tenant's usage by São Paulo day and model on GET /activity, equal to the ledger", async () => {
    const t = await stack.tenant('1.00');
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: t.key });
    const ids: string[] = [];
    for (const model of ['sim/echo', 'sim/echo', 'sim/lorem']) {
      const r = await client.chat.completions.create({ model, max_tokens: 5, messages: [{ role: 'user', content: 'um dois' }] }).withResponse();
      ids.push(r.response.headers.get('x-request-id')!);
    }
    await stack.waitSettled(ids);
    // debits that are no usage: a Pix refund and an operator's adjustments (one naming a request's model),
    // written as their functions write them: each row with its balance after, the tenant's balance moved
    // with them (so the ledger still reconciles for every other test file's `ledger check`)
    const extra: Array<[kind: 'debit' | 'credit', amount: bigint, source: string, ref: string, model: string | null]> = [
      ['debit', 1000n, 'pix_refund', 'refund-', null],
      ['debit', 2000n, 'adjustment', 'console:adj-', null],
      ['debit', 3000n, 'adjustment', 'console:adj2-', 'sim/echo'],
      ['credit', 4000n, 'adjustment', 'console:adj3-', 'sim/echo'],
    ];
    for (const [kind, amount, source, ref, model] of extra) {
      await stack.db.query(
        `with t as (update tenants set balance_micros = balance_micros + case when $2 = 'credit' then $3::bigint else -$3::bigint end
                     where id = $1 returning balance_micros)
         insert into ledger (tenant_id, kind, amount_micros, balance_after_micros, source, external_id, model, note)
         select $1, $2, $3, t.balance_micros, $4, $5 || $1, $6, 'test' from t`,
        [t.tenantId, kind, amount, source, ref, model],
      );
    }
    const { rows } = await stack.db.query(
      `select model, count(*)::int as n, sum(amount_micros)::bigint as amount, sum(input_tokens)::int as prompt, sum(output_tokens)::int as completion
         from ledger where tenant_id = $1 and kind = 'debit' and source = 'request' group by model order by model`,
      [t.tenantId],
    );
    expect(rows.map((r) => [r.model, r.n])).toEqual([
      ['sim/echo', 2],
      ['sim/lorem', 1],
    ]);
    const today = new Intl.DateTimeFormat('en-CA', { timeZone: 'America/Sao_Paulo' }).format(new Date());
    const res = await fetch(`${stack.baseUrl}/activity`, { headers: { authorization: `Bearer ${t.key}` } });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ currency: 'BRL', time_zone: 'America/Sao_Paulo' });
    expect(body.data).toEqual(
      rows.map((r) => ({
        date: today,
        model: r.model,
        model_permaslug: r.model,
        endpoint_id: r.model,
        provider_name: 'catraca',
        usage: Number(r.amount) / 1e6,
        byok_usage_inference: 0,
        requests: r.n,
        prompt_tokens: r.prompt,
        completion_tokens: r.completion,
        reasoning_tokens: 0,
        batch_usage: 0,
        batch_requests: 0,
      })),
    );
    const other = await (await fetch(`${stack.baseUrl}/activity?date=2000-01-01`, { headers: { authorization: `Bearer ${t.key}` } })).json();
    expect(other.data).toEqual([]);
    const bad = await fetch(`${stack.baseUrl}/activity?date=yesterday`, { headers: { authorization: `Bearer ${t.key}` } });
    expect([bad.status, (await bad.json()).error.param]).toEqual([400, 'date']);
  });

  it('lists the catalog with BRL prices', async () => {
    const res = await fetch(`${stack.baseUrl}/models`);
    expect(res.status).toBe(200);
    const body = await res.json();
    const echo = body.data.find((m: { id: string }) => m.id === 'sim/echo');
    expect(echo.pricing).toEqual({
      prompt: '0.000001',
      completion: '0.000002',
      request: '0',
      image: '0',
      input_cache_read: '0.000001',
      input_cache_write: '0.000001',
      internal_reasoning: '0.000002',
      currency: 'BRL',
    });
    expect(echo.pricing_per_million_tokens).toEqual({ prompt: '1', completion: '2', currency: 'BRL' });
  });
});

describe('errors, in the documented shape', () => {
  const post = (key: string | null, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${stack.baseUrl}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const ok = { model: 'sim/echo', messages: [{ role: 'user', content: 'hi' }] };

  it('400 for invalid JSON and invalid fields; nothing is charged', async () => {
    const t = await stack.tenant('1.00');
    let res = await post(t.key, '{"model":');
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: { message: 'Request body is not valid JSON.', type: 'invalid_request_error', code: 'invalid_json', param: null },
    });
    res = await post(t.key, { model: 'sim/echo', messages: [] });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: {
        message: "Invalid value for 'messages': messages must contain at least one message",
        type: 'invalid_request_error',
        code: 'invalid_request',
        param: 'messages',
      },
    });
    res = await post(t.key, { ...ok, max_tokens: 999999 });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: 'invalid_request', param: 'max_tokens' });
    expect(res.headers.get('x-request-id')).toMatch(/^gen-/);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });

  it('401 for a missing, unknown or revoked key, without echoing the key', async () => {
    let res = await post(null, ok);
    expect(res.status).toBe(401);
    expect((await res.json()).error).toEqual({
      message: 'Missing API key. Send it as "Authorization: Bearer <API_KEY>".',
      type: 'authentication_error',
      code: 'missing_api_key',
      param: null,
    });
    const bogus = 'sk-cat-v1-' + '0'.repeat(64);
    res = await post(bogus, ok);
    expect(res.status).toBe(401);
    const text = await res.text();
    expect(JSON.parse(text).error.code).toBe('invalid_api_key');
    expect(text).not.toContain(bogus);
  });

  it('402 when the balance cannot cover max_tokens, saying how many tokens are affordable', async () => {
    const t = await stack.tenant('0.000100'); // 100 micro-reais
    const res = await post(t.key, { ...ok, max_tokens: 4000 });
    expect(res.status).toBe(402);
    const body = await res.json();
    // input bound for {"role":"user","content":"hi"} (src/billing/estimate.ts): 8 per request + 8 per
    // message + 6 bytes of "user" as JSON + 2 bytes of text = 24 tokens → 24 µBRL; 76 left / 2 per token = 38
    expect(body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_balance', param: null });
    expect(body.error.message).toContain('You requested up to 4000 tokens, but can only afford 38');
    expect(await balanceOf(t.tenantId)).toBe(100n);
  });

  it('403 for a model outside the allowlist, 404 for an unknown model', async () => {
    const t = await stack.tenant('1.00', { models: ['sim/lorem'] });
    let res = await post(t.key, ok);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      error: { message: 'This API key is not allowed to use model "sim/echo".', type: 'permission_error', code: 'model_not_allowed', param: 'model' },
    });
    res = await post(t.key, { ...ok, model: 'nope/missing' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      error: { message: 'The model "nope/missing" does not exist.', type: 'not_found_error', code: 'model_not_found', param: 'model' },
    });
  });

  it('413 for a body over the limit', async () => {
    const t = await stack.tenant('1.00');
    const res = await post(t.key, { ...ok, messages: [{ role: 'user', content: 'x'.repeat(5 * 1024 * 1024) }] });
    expect(res.status).toBe(413);
    expect((await res.json()).error).toEqual({
      message: 'Request body exceeds the limit of 4194304 bytes.',
      type: 'invalid_request_error',
      code: 'request_too_large',
      param: null,
    });
  });

  it('a missing or malformed key is refused before the body is read (the client has sent only headers)', async () => {
    const { port } = new URL(stack.baseUrl);
    const answer = (authorization: string | null) =>
      new Promise<string>((resolve, reject) => {
        const sock = net.connect(Number(port), '127.0.0.1');
        let got = '';
        const timer = setTimeout(() => (sock.destroy(), reject(new Error(`no answer before the body: ${got}`))), 2000);
        sock.on('data', (d) => {
          got += d.toString('utf8');
          if (got.includes('\r\n\r\n') && got.includes('}')) {
            clearTimeout(timer);
            sock.destroy();
            resolve(got);
          }
        });
        sock.on('error', reject);
        // a 4 MiB body is announced and never sent
        sock.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 4194304\r\n${authorization ? `authorization: ${authorization}\r\n` : ''}\r\n`,
        );
      });
    const missing = await answer(null);
    expect(missing).toMatch(/^HTTP\/1\.1 401 /);
    expect(missing).toContain('"code":"missing_api_key"');
    const malformed = await answer('Bearer sk-not-one-of-ours');
    expect(malformed).toMatch(/^HTTP\/1\.1 401 /);
    expect(malformed).toContain('"code":"invalid_api_key"');
    expect(malformed).not.toContain('sk-not-one-of-ours');
  });

  it('503 at once when no worker serves the pool, and the hold is released', async () => {
    const t = await stack.tenant('1.00');
    await upsertModel(stack.db, { id: 'ghost/model', pool: 'ghostpool', upstream_model: 'x', input_price: 1_000_000n, output_price: 1_000_000n });
    const started = Date.now();
    const res = await post(t.key, { ...ok, model: 'ghost/model' });
    expect(res.status).toBe(503);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(await res.json()).toEqual({
      error: { message: 'No worker is serving the "ghostpool" pool right now.', type: 'service_unavailable', code: 'no_worker_available', param: null },
    });
    await stack.waitNoHolds(t.tenantId, 2000);
    expect(await balanceOf(t.tenantId)).toBe(1_000_000n);
  });

  it('404 with the error shape for unknown routes', async () => {
    const res = await fetch(`${stack.baseUrl}/nothing`);
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe('route_not_found');
    expect(res.headers.get('x-request-id')).toMatch(/^gen-/);
  });

  it('405 for a known route with another method, from the one route table (GET /v1/auth/key exists, so POST is 405)', async () => {
    for (const [method, path] of [
      ['POST', '/auth/key'],
      ['POST', '/key'],
      ['GET', '/chat/completions'],
      ['DELETE', '/models'],
    ]) {
      const res = await fetch(`${stack.baseUrl}${path}`, { method });
      expect([method, path, res.status]).toEqual([method, path, 405]);
      expect((await res.json()).error).toEqual({
        message: `Method ${method} is not allowed on /v1${path}.`,
        type: 'invalid_request_error',
        code: 'method_not_allowed',
        param: null,
      });
    }
  });
});

describe('revocation and cancellation', () => {
  it('a key revoked through one front door is refused by another within one second', async () => {
    const t = await stack.tenant('1.00');
    const other = stack.urlOf(stack.gateways[1]);
    const call = (base: string) => fetch(`${base}/key`, { headers: { authorization: `Bearer ${t.key}` } });
    expect((await call(other)).status).toBe(200); // cached on the second front door
    await revokeKey(stack.db, t.keyId);
    stack.nc.publish(subjects.keyInvalidated, encode({ key_id: t.keyId }));
    const revokedAt = Date.now();
    let status = 0;
    while (Date.now() - revokedAt < 1000) {
      status = (await call(other)).status;
      if (status === 401) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(status).toBe(401);
    const res = await call(other);
    expect((await res.json()).error.code).toBe('revoked_api_key');
  });

  it('client disconnect mid-stream cancels generation and bills only what was generated', async () => {
    const t = await stack.tenant('1.00');
    const controller = new AbortController();
    const res = await fetch(`${stack.baseUrl}/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/lorem', stream: true, max_tokens: 400, sim: { tokens_per_second: 50 }, messages: [{ role: 'user', content: 'go' }] }),
    });
    const requestId = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    let received = '';
    while ((received.match(/"content":"[^"]/g) ?? []).length < 5) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    await stack.waitSettled([requestId]);
    const { rows } = await stack.db.query('select output_tokens, input_tokens, outcome, amount_micros from ledger where request_id = $1', [requestId]);
    expect(rows[0].outcome).toBe('cancelled');
    expect(rows[0].output_tokens).toBeGreaterThanOrEqual(5);
    expect(rows[0].output_tokens).toBeLessThan(15); // 400 would have been generated without the cancel
    expect(rows[0].amount_micros).toBe(costMicros(rows[0].input_tokens, rows[0].output_tokens, SIM_PRICES.lorem));
    await stack.waitNoHolds(t.tenantId);
  });

  it('never writes an API key to any process log', async () => {
    const lines = stack.allLogLines().join('\n');
    expect(lines).not.toMatch(/sk-cat-v1-[0-9a-f]{8}/);
  });
});

describe('monitoring', () => {
  it('the front door serves Prometheus /metrics on its internal port only, never on the public one', async () => {
    const pub = await fetch(`${stack.baseUrl.replace('/v1', '')}/metrics`);
    expect(pub.status).toBe(404);
    expect((await pub.json()).error.code).toBe('route_not_found');
    const line = stack.gateways[0].lines.find((l) => l.includes('front door listening'))!;
    const metricsPort = JSON.parse(line).metrics_port;
    expect(metricsPort).toBeGreaterThan(0);
    const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4');
    const text = await res.text();
    expect(text).toMatch(/^# TYPE catraca_jobs_total counter$/m);
    expect(text).toMatch(/^catraca_http_responses_total\{instance="[^"]+",status="200"\} [1-9]\d*$/m);
    expect(text).toMatch(/^# TYPE catraca_admit_seconds histogram$/m);
  });

  it('every process answers $SRV.PING over NATS', async () => {
    const client = stack.nc.services.client();
    const names = new Set<string>();
    for await (const r of await client.ping()) names.add(r.name);
    expect([...names].sort()).toEqual(expect.arrayContaining(['catraca-gateway', 'catraca-metering', 'catraca-worker']));
  });

  it('$SRV.STATS carries each process figures: worker job latencies, metering settlements', async () => {
    const client = stack.nc.services.client();
    const data: Record<string, { histograms: Record<string, { count: number }>; counters: Record<string, number> }> = {};
    for await (const s of await client.stats()) data[s.name] = s.endpoints![0].data as (typeof data)[string];
    expect(data['catraca-worker'].histograms.catraca_latency_seconds.count).toBeGreaterThan(0);
    expect(data['catraca-metering'].counters.catraca_jobs_total).toBeGreaterThan(0);
    expect(data['catraca-gateway'].counters.catraca_jobs_total).toBeGreaterThan(0);
  });
});

describe('shutdown', () => {
  it('a front door on SIGTERM finishes its in-flight stream, then exits 0 and takes no new connection', async () => {
    const t = await stack.tenant('1.00');
    const door = await stack.spawnGateway();
    const url = stack.urlOf(door);
    const res = await fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim/lorem', stream: true, max_tokens: 20, sim: { tokens_per_second: 20 }, messages: [{ role: 'user', content: 'go' }] }),
    });
    expect(res.status).toBe(200);
    const body = res.text();
    await new Promise((r) => setTimeout(r, 200));
    door.child.kill('SIGTERM');
    const text = await body;
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events[events.length - 1]).toBe('data: [DONE]');
    expect(JSON.parse(events[events.length - 2].slice(6)).choices[0].finish_reason).toBe('length');
    expect(await door.exited).toBe(0);
    stack.gateways.splice(stack.gateways.indexOf(door), 1);
    await expect(fetch(`${url}/models`)).rejects.toThrow();
    await stack.waitSettled([res.headers.get('x-request-id')!]);
  });
});
