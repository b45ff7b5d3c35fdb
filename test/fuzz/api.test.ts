import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import OpenAI from 'openai';
import { startStack, type TestStack } from '../helpers/stack.ts';
import { rawRequest, trickle, type RawResponse } from './raw-http.ts';
import { expectDocumented4xx } from './expect.ts';
import { MAX_JSON_DEPTH, scanJson } from '../../src/chat/json-depth.ts';
import { knownParams } from '../../src/chat/params.ts';

// Property-based fuzzing of POST /v1/chat/completions against a real front door, worker, metering,
// NATS and PostgreSQL. Every generated request must get a documented 4xx in OpenAI's error shape
// (or, for bytes that are not HTTP at all, a closed connection), charge nothing and leave no hold;
// after every property the front door is still up and serves a valid request.
//
// The fuzzed tenant's key has a (huge) request rate limit: such keys are never leased, so every
// admission is a row in `holds` of its own and "no hold left" is exact after each case.

const BODY_TIMEOUT_MS = 3000;
const MAX_BODY = 4 * 1024 * 1024;
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
const runs = (n: number) => ({ numRuns: Number(process.env.FUZZ_RUNS ?? n), seed: SEED, endOnFailure: true });

let stack: TestStack;
let port: number;
let fuzzed: { tenantId: string; key: string };
let canary: { tenantId: string; key: string };
const GRANT = 1_000_000_000n; // R$ 1.000,00

beforeAll(async () => {
  stack = await startStack({ gateways: 1, workers: 1, env: { BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS) } });
  port = stack.gateways[0].port!;
  fuzzed = await stack.tenant('1000.00', { rateLimitRequests: 1_000_000, rateLimitIntervalS: 1 });
  canary = await stack.tenant('1000.00');
  console.log(`fuzz seed ${SEED} (FUZZ_SEED=${SEED} reproduces it)`);
}, 60000);

afterAll(async () => {
  await stack?.stop();
});

async function tenantState(tenantId: string) {
  const t = await stack.db.query('select balance_micros, held_micros from tenants where id = $1', [tenantId]);
  const h = await stack.db.query('select count(*)::int as n from holds where tenant_id = $1', [tenantId]);
  const l = await stack.db.query("select count(*)::int as n from ledger where tenant_id = $1 and kind = 'debit'", [tenantId]);
  return { balance: t.rows[0].balance_micros as bigint, held: t.rows[0].held_micros as bigint, holds: h.rows[0].n as number, debits: l.rows[0].n as number };
}

/** Nothing charged, nothing held: exactly the grant, to the micro-real. */
async function expectUntouched(tenantId = fuzzed.tenantId) {
  expect(await tenantState(tenantId)).toEqual({ balance: GRANT, held: 0n, holds: 0, debits: 0 });
}

/** The front door is up and serves a valid request (of another tenant) end to end. */
async function expectServing() {
  expect(stack.gateways[0].child.exitCode).toBe(null);
  const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: canary.key, maxRetries: 0 });
  const c = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: 'still here' }], max_tokens: 5 });
  expect(c.choices[0].message.content).toBe('still here');
}

function expectNoServerErrors() {
  const bad = stack.gateways[0].lines.filter((l) => /"level":(50|60)|request failed/.test(l));
  expect(bad, 'no error logged by the front door').toEqual([]);
}

const post = (body: Buffer | string, headers: Array<[string, string | Buffer]> = []): Promise<RawResponse> =>
  rawRequest({ port, headers: [['authorization', `Bearer ${fuzzed.key}`], ['content-type', 'application/json'], ...headers], body, timeoutMs: 20000 });

const validBody = (over: Record<string, unknown> = {}) => ({ model: 'sim/echo', messages: [{ role: 'user', content: 'olá' }], max_tokens: 5, ...over });

// ---- what the front door validates, and what a wrong value of each looks like ------------------
const inRange = (v: unknown, lo: number, hi: number) => typeof v === 'number' && v >= lo && v <= hi;
const posInt = (v: unknown, max: number) => typeof v === 'number' && Number.isInteger(v) && v > 0 && v <= max;
/** true when `v` is an acceptable value of `field` for sim/echo (max_tokens ≤ 4096) */
const VALID: Record<string, (v: unknown) => boolean> = {
  model: (v) => v === 'sim/echo' || v === 'sim/lorem',
  messages: () => false, // replaced by a value that is never a valid message list (filtered below)
  stream: (v) => v === null || typeof v === 'boolean',
  stream_options: (v) =>
    v === null || (typeof v === 'object' && !Array.isArray(v) && [undefined, true, false].includes((v as { include_usage?: unknown }).include_usage as never)),
  max_tokens: (v) => v === null || posInt(v, 4096),
  max_completion_tokens: (v) => v === null || posInt(v, 4096),
  n: (v) => v === null || v === 1,
  temperature: (v) => v === null || inRange(v, 0, 2),
  top_p: (v) => v === null || inRange(v, 0, 1),
  service_tier: (v) => v === null || v === 'auto' || v === 'default',
  plugins: (v) => v === null || (Array.isArray(v) && v.length === 0),
  web_search_options: (v) => v === null,
  modalities: (v) => v === null || (Array.isArray(v) && v.every((m) => m === 'text')),
  audio: (v) => v === null,
  prediction: (v) => v === null,
  logprobs: (v) => v !== true,
  top_logprobs: (v) => !(typeof v === 'number' && v > 0),
  prompt: () => false,
};
const anyJson = fc.jsonValue({ maxDepth: 3 });
const wrongField = fc
  .constantFrom(...Object.keys(VALID))
  .chain((field) =>
    fc
      .tuple(fc.constant(field), fc.oneof(anyJson, fc.constantFrom(-1, 0, 0.5, 4097, 1e308, 2.5, '', 'sim/echo ', true, [], {}, [1], 'auto ')))
      .filter(([f, v]) => !VALID[f](v)),
  );
const badMessages = fc.oneof(
  anyJson.filter((v) => !Array.isArray(v)),
  fc.constant([]),
  fc.array(fc.oneof(anyJson.filter((v) => typeof v !== 'object' || v === null || Array.isArray(v))), { minLength: 1, maxLength: 3 }),
  fc
    .record({ role: anyJson.filter((r) => !['system', 'developer', 'user', 'assistant', 'tool', 'function'].includes(r as string)), content: fc.string() })
    .map((m) => [m]),
  fc
    .record({ role: fc.constantFrom('user', 'system'), content: anyJson.filter((c) => c !== null && typeof c !== 'string' && !Array.isArray(c)) })
    .map((m) => [m]),
  fc.record({ role: fc.constant('user'), content: fc.constant('x'), name: anyJson.filter((n) => typeof n !== 'string' && n !== null) }).map((m) => [m]),
  fc
    .record({
      role: fc.constant('user'),
      content: fc.array(
        anyJson.filter((p) => typeof p !== 'object' || p === null || Array.isArray(p)),
        { minLength: 1, maxLength: 2 },
      ),
    })
    .map((m) => [m]),
);
const unknownField = fc.string({ minLength: 1, maxLength: 20 }).filter((k) => !(k in VALID) && !KNOWN.has(k) && k !== '__proto__');
/** The fields the front door has a rule for (src/chat/params.ts): any other is refused as unknown. */
const KNOWN = knownParams('sim');

/** Invalid UTF-8: each of these byte strings is refused by a strict decoder wherever it stands. */
const BAD_UTF8 = [[0xff], [0xfe], [0x80], [0xc0, 0x80], [0xc3], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]];

describe('fuzz: POST /v1/chat/completions bodies', () => {
  it('random JSON values are refused with a documented 400', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 6 }), async (v) => {
        const r = await post(JSON.stringify(v));
        expectDocumented4xx(r, ['invalid_request', 'unsupported_parameter', 'model_not_found']);
        await expectUntouched();
      }),
      runs(150),
    );
    await expectServing();
  }, 60000);

  it('a wrong value in any validated field is a 400/404 naming it; nothing is held', async () => {
    await fc.assert(
      fc.asyncProperty(wrongField, async ([field, value]) => {
        const r = await post(JSON.stringify(validBody({ [field]: value })));
        const code = expectDocumented4xx(r, ['invalid_request', 'unsupported_parameter', 'model_not_found']);
        if (code === 'invalid_request' || code === 'unsupported_parameter')
          expect((r.json as { error: { param: string } }).error.param?.split(/[.[]/)[0]).toBe(field);
        await expectUntouched();
      }),
      runs(200),
    );
    await fc.assert(
      fc.asyncProperty(badMessages, async (messages) => {
        const r = await post(JSON.stringify(validBody({ messages })));
        expectDocumented4xx(r, ['invalid_request', 'unsupported_content']);
        await expectUntouched();
      }),
      runs(100),
    );
    await fc.assert(
      fc.asyncProperty(unknownField, anyJson, async (k, v) => {
        const r = await post(JSON.stringify(validBody({ [k]: v })));
        expectDocumented4xx(r, ['unsupported_parameter']);
        await expectUntouched();
      }),
      runs(60),
    );
    await expectServing();
  }, 60000);

  it(`nesting deeper than ${MAX_JSON_DEPTH} levels anywhere is a 400 json_too_deep (up to 10 000 levels)`, async () => {
    const where = fc.constantFrom(
      (x: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"metadata":${x}}`,
      (x: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x","extra":${x}}]}`,
      (x: string) => `{"messages":${x},"model":"sim/echo"}`,
      (x: string) => x,
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: MAX_JSON_DEPTH + 1, max: 10_000 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 8 }),
        where,
        async (depth, kinds, wrap) => {
          let open = '';
          let close = '';
          for (let i = 0; i < depth; i++) {
            const obj = kinds[i % kinds.length];
            open += obj ? '{"k":' : '[';
            close = (obj ? '}' : ']') + close;
          }
          const r = await post(wrap(`${open}"leaf"${close}`));
          expectDocumented4xx(r, ['json_too_deep']);
          await expectUntouched();
        },
      ),
      runs(60),
    );
    await expectServing();
  }, 60000);

  it('numbers beyond a double (1e400) are a 400 invalid_json wherever they stand', async () => {
    const huge = fc.oneof(
      fc.constantFrom('1e400', '-1e400', '1E999', '2e308', '-9.9e+1000', '1' + '0'.repeat(400), '-' + '9'.repeat(320) + '.5'),
      fc.integer({ min: 309, max: 100000 }).map((e) => `1e${e}`),
    );
    const where = fc.constantFrom(
      (n: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"max_tokens":${n}}`,
      (n: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"seed":${n}}`,
      (n: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"temperature":${n}}`,
      (n: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"metadata":{"a":[1,${n}]}}`,
      (n: string) => `{"model":"sim/echo","messages":[{"role":"user","content":"x"}],"logit_bias":{"50256":${n}}}`,
    );
    await fc.assert(
      fc.asyncProperty(huge, where, async (n, wrap) => {
        const r = await post(wrap(n));
        expectDocumented4xx(r, ['invalid_json']);
        await expectUntouched();
      }),
      runs(50),
    );
    await expectServing();
  }, 60000);

  it('invalid UTF-8 anywhere in the body is a 400 invalid_json (never U+FFFD billed as text)', async () => {
    const body = Buffer.from(JSON.stringify(validBody({ messages: [{ role: 'user', content: 'ação rápida' }] })));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...BAD_UTF8), fc.integer({ min: 0, max: body.length }), async (bad, at) => {
        const r = await post(Buffer.concat([body.subarray(0, at), Buffer.from(bad), body.subarray(at)]));
        expectDocumented4xx(r, ['invalid_json']);
        await expectUntouched();
      }),
      runs(80),
    );
    // the same bytes inside the message text, where a lenient decoder would have made them U+FFFD
    const i = body.indexOf('ação');
    for (const bad of BAD_UTF8) {
      const r = await post(Buffer.concat([body.subarray(0, i), Buffer.from(bad), body.subarray(i)]));
      expect(expectDocumented4xx(r, ['invalid_json'])).toBe('invalid_json');
      expect((r.json as { error: { message: string } }).error.message).toMatch(/UTF-8/);
    }
    await expectUntouched();
    await expectServing();
  }, 60000);

  it('duplicate keys: the last one decides, as JSON.parse (an invalid last value is a 400)', async () => {
    await fc.assert(
      fc.asyncProperty(wrongField, async ([field, value]) => {
        const base = JSON.stringify(validBody());
        const r = await post(`${base.slice(0, -1)},${JSON.stringify(field)}:${JSON.stringify(value)}}`);
        expectDocumented4xx(r, ['invalid_request', 'unsupported_parameter', 'model_not_found']);
        await expectUntouched();
      }),
      runs(80),
    );
    // the other way round the request is served, priced and forwarded as what the gateway parsed
    const r = await rawRequest({
      port,
      headers: [
        ['authorization', `Bearer ${canary.key}`],
        ['content-type', 'application/json'],
      ],
      body: '{"model":"nope/nope","messages":[{"role":"user","content":"x"}],"model":"sim/echo","max_tokens":1,"max_tokens":2}',
    });
    expect(r.status).toBe(200);
    expect((r.json as { model: string }).model).toBe('sim/echo');
    const id = r.headers['x-request-id'];
    await stack.waitSettled([id]);
    const { rows } = await stack.db.query('select amount_micros from ledger where request_id = $1', [id]);
    expect(rows[0].amount_micros).toBe(9n); // prompt 3 + (3 + 1) = 7 tokens × R$ 1/M + 1 token × R$ 2/M
  }, 60000);

  it('truncated bodies are a 400 invalid_json', async () => {
    const body = Buffer.from(
      JSON.stringify(
        validBody({
          stream: true,
          temperature: 0.5,
          stop: ['a', 'b'],
          messages: [
            { role: 'system', content: 'sé breve' },
            { role: 'user', content: 'oi' },
          ],
        }),
      ),
    );
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: body.length - 1 }), async (cut) => {
        const r = await post(body.subarray(0, cut));
        expectDocumented4xx(r, ['invalid_json']);
        await expectUntouched();
      }),
      runs(80),
    );
    await expectServing();
  }, 60000);

  it('bodies over MAX_BODY_BYTES are a 413, and so are those whose job exceeds NATS max_payload', async () => {
    // over the limit: read and discarded, then 413; far over the declared limit: 413 at once
    for (const size of [MAX_BODY + 1, MAX_BODY + 65536]) {
      const r = await post(Buffer.alloc(size, 0x20));
      expectDocumented4xx(r, ['request_too_large']);
    }
    const big = await rawRequest({
      port,
      auto: false,
      headers: [
        ['host', 'x'],
        ['authorization', `Bearer ${fuzzed.key}`],
        ['content-length', String(MAX_BODY * 64)],
      ],
      body: Buffer.alloc(1024, 0x20),
      timeoutMs: 10000,
    });
    expectDocumented4xx(big, ['request_too_large']);
    expect(big.closed).toBe(true);
    // a 4 MiB string: over the limit once quoted and wrapped
    const r4 = await post(JSON.stringify(validBody({ messages: [{ role: 'user', content: 'a'.repeat(MAX_BODY) }] })));
    expectDocumented4xx(r4, ['request_too_large']);
    // under MAX_BODY_BYTES but over NATS max_payload (1 MiB): admitted, then refused; the hold goes back
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1024 * 1024, max: MAX_BODY - 1024 }), fc.boolean(), async (size, stream) => {
        const r = await post(JSON.stringify(validBody({ stream, messages: [{ role: 'user', content: 'b'.repeat(size) }] })));
        expectDocumented4xx(r, ['request_too_large']);
        expect((r.json as { error: { message: string } }).error.message).toMatch(/forwarded to a worker/);
        await expectUntouched();
      }),
      runs(8),
    );
    await expectUntouched();
    await expectServing();
    expectNoServerErrors();
  }, 60000);

  it('a job over max_payload under a balance lease returns the lease to the balance (nothing charged)', async () => {
    const leased = await stack.tenant('1000.00'); // no rate limit: admitted from a lease
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: leased.key, maxRetries: 0 });
    const err = await client.chat.completions
      .create({ model: 'sim/echo', messages: [{ role: 'user', content: 'c'.repeat(2 * 1024 * 1024) }], max_tokens: 5 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(413);
    expect(err.error).toMatchObject({ code: 'request_too_large', type: 'invalid_request_error' });
    await stack.waitNoHolds(leased.tenantId, 15000); // the lease closes with nothing left to cover
    expect(await tenantState(leased.tenantId)).toEqual({ balance: GRANT, held: 0n, holds: 0, debits: 0 });
  }, 60000);
});

describe('fuzz: Authorization headers', () => {
  const body = JSON.stringify(validBody());
  const key = () => fuzzed.key;
  // Control bytes (NUL, 0x01–0x1f but tab) make this uWS build's parser wait for a request that
  // never completes until its 10 s idle timeout: they are in the slow-senders test below, with the
  // others there; here they become printable (CR and LF would end the header line anyway).
  const binary = fc.uint8Array({ minLength: 1, maxLength: 64 }).map((b) => Buffer.from(b.map((x) => (x < 0x20 && x !== 0x09 ? x | 0x40 : x))));
  const header = fc.oneof(
    fc.constant(''),
    fc.string({ maxLength: 40 }).filter((s) => !/^bearer\s/i.test(s.trim())),
    fc.constantFrom('Bearer', 'Bearer ', 'bearer', 'Basic dXNlcjpwYXNz', 'Token sk-cat-v1-abc', 'Bearer  ', 'Bearer\t', 'Bearer sk-cat-v1-', 'Bearer sk-'),
    fc
      .string({ minLength: 1, maxLength: 60 })
      .map((s) => `Bearer ${s}`)
      .filter((h) => !h.includes(key())),
    // (CR and LF end a header line: what follows would be another header, not this one's value)
    binary.map((b) => Buffer.concat([Buffer.from('Bearer '), b])),
    binary,
    fc.integer({ min: 1, max: 10 }).map((k) => `Bearer ${'k'.repeat(k * 1024)}`),
    fc.constant(null).map(() => `Bearer ${key()} ${key()}`),
    fc.constant(null).map(() => `Bearer ${key().slice(0, -1)}`),
    fc.constant(null).map(() => `Bearer ${key()}x`),
    fc.constant(null).map(() => `Bearer ${key().toUpperCase()}`),
    fc.constant(null).map(() => `${key()}`),
  );
  it('malformed keys are a 401 before the body is read', async () => {
    await fc.assert(
      fc.asyncProperty(header, async (h) => {
        const r = await rawRequest({
          port,
          headers: [
            ['authorization', h as string | Buffer],
            ['content-type', 'application/json'],
          ],
          body,
          timeoutMs: 5000,
        });
        expectDocumented4xx(r, ['missing_api_key', 'invalid_api_key']);
        await expectUntouched();
      }),
      runs(150),
    );
    // no header at all
    const none = await rawRequest({ port, headers: [['content-type', 'application/json']], body });
    expectDocumented4xx(none, ['missing_api_key']);
    await expectServing();
    expectNoServerErrors();
  }, 60000);
});

describe('fuzz: strings PostgreSQL cannot take, on every route', () => {
  // NUL (PostgreSQL text refuses it) and the other control characters in each string that reaches
  // PostgreSQL (a model name looked up, the end user recorded, an id queried), on each route: a 400
  // naming the field, nothing held, never a 500.
  const control = fc
    .tuple(fc.string({ maxLength: 6 }), fc.constantFrom(...Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)), '\u007f'), fc.string({ maxLength: 6 }))
    .map(([a, c, b]) => `${a}${c}${b}`);
  const nul = fc.tuple(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 })).map(([a, b]) => `${a}\u0000${b}`);
  const chatBody = (over: Record<string, unknown>) => validBody(over);
  const msgs = [{ role: 'user', content: 'olá' }];
  type Case = { route: string; param: string; body: (v: string) => Record<string, unknown>; only?: 'nul' };
  const CASES: Case[] = [
    { route: '/v1/chat/completions', param: 'model', body: (v) => chatBody({ model: v }) },
    { route: '/v1/chat/completions', param: 'models[1]', body: (v) => chatBody({ models: ['sim/echo', v] }) },
    { route: '/v1/chat/completions', param: 'models[0]', body: (v) => ({ models: [v], messages: msgs, max_tokens: 5 }) },
    { route: '/v1/chat/completions', param: 'provider.order[0]', body: (v) => chatBody({ provider: { order: [v] } }) },
    { route: '/v1/chat/completions', param: 'provider.only[1]', body: (v) => chatBody({ provider: { only: ['sim', v] } }) },
    { route: '/v1/chat/completions', param: 'provider.ignore[0]', body: (v) => chatBody({ provider: { ignore: [v] } }) },
    { route: '/v1/chat/completions', param: 'user', body: (v) => chatBody({ user: v }) },
    { route: '/v1/embeddings', param: 'model', body: (v) => ({ model: v, input: 'x' }) },
    { route: '/v1/embeddings', param: 'user', body: (v) => ({ model: 'sim/echo', input: 'x', user: v }) },
    { route: '/v1/completions', param: 'model', body: (v) => ({ model: v, prompt: 'x', max_tokens: 5 }) },
    { route: '/v1/completions', param: 'user', body: (v) => ({ model: 'sim/echo', prompt: 'x', max_tokens: 5, user: v }) },
    { route: '/v1/responses', param: 'model', body: (v) => ({ model: v, input: 'x', max_output_tokens: 16 }) },
    { route: '/v1/responses', param: 'user', body: (v) => ({ model: 'sim/echo', input: 'x', user: v }) },
    { route: '/v1/responses', param: 'previous_response_id', body: (v) => ({ model: 'sim/echo', input: 'x', previous_response_id: v }) },
    // stored (store defaults to true): jsonb refuses U+0000 anywhere
    { route: '/v1/responses', param: 'input', body: (v) => ({ model: 'sim/echo', input: v }), only: 'nul' },
    { route: '/v1/responses', param: 'input[0].content', body: (v) => ({ model: 'sim/echo', input: [{ role: 'user', content: v }] }), only: 'nul' },
    {
      route: '/v1/responses',
      param: 'input[1].content[0].text',
      body: (v) => ({
        model: 'sim/echo',
        input: [
          { role: 'user', content: 'a' },
          { role: 'user', content: [{ type: 'input_text', text: v }] },
        ],
      }),
      only: 'nul',
    },
    { route: '/v1/responses', param: 'instructions', body: (v) => ({ model: 'sim/echo', input: 'x', instructions: v }), only: 'nul' },
    { route: '/v1/responses', param: 'metadata.k', body: (v) => ({ model: 'sim/echo', input: 'x', metadata: { k: v } }), only: 'nul' },
  ];

  it('a control character in any stored string of any route is a 400 naming the field; nothing held', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...CASES), control, nul, async (c, ctrl, withNul) => {
        const r = await rawRequest({
          port,
          path: c.route,
          headers: [
            ['authorization', `Bearer ${fuzzed.key}`],
            ['content-type', 'application/json'],
          ],
          body: JSON.stringify(c.body(c.only ? withNul : ctrl)),
          timeoutMs: 20000,
        });
        expect(expectDocumented4xx(r, ['invalid_request'])).toBe('invalid_request');
        expect((r.json as { error: { param: string } }).error.param, `${c.route} ${c.param}`).toBe(c.param);
        await expectUntouched();
      }),
      runs(150),
    );
    await expectServing();
    expectNoServerErrors();
  }, 120000);

  it("/v1/messages and /v1/messages/count_tokens (x-api-key): a control character in model or metadata.user_id is a 400 in Anthropic's shape naming the field; nothing held", async () => {
    const anthropicCases: Array<{ route: string; param: string; body: (v: string) => Record<string, unknown> }> = [
      { route: '/v1/messages', param: 'model', body: (v) => ({ model: v, max_tokens: 5, messages: msgs }) },
      { route: '/v1/messages', param: 'metadata.user_id', body: (v) => ({ model: 'sim/echo', max_tokens: 5, messages: msgs, metadata: { user_id: v } }) },
      { route: '/v1/messages/count_tokens', param: 'model', body: (v) => ({ model: v, messages: msgs }) },
      { route: '/v1/messages/count_tokens', param: 'metadata.user_id', body: (v) => ({ model: 'sim/echo', messages: msgs, metadata: { user_id: v } }) },
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...anthropicCases), fc.oneof(control, nul), async (c, v) => {
        const r = await rawRequest({
          port,
          path: c.route,
          headers: [
            ['x-api-key', fuzzed.key],
            ['anthropic-version', '2023-06-01'],
            ['content-type', 'application/json'],
          ],
          body: JSON.stringify(c.body(v)),
          timeoutMs: 20000,
        });
        const where = `${c.route} ${c.param} ${JSON.stringify(v)}`;
        expect(r.status, where).toBe(400);
        const body = r.json as { type: string; error: { type: string; message: string } };
        expect(Object.keys(body), where).toEqual(['type', 'error']);
        expect(body.type, where).toBe('error');
        expect(Object.keys(body.error), where).toEqual(['type', 'message']);
        expect(body.error.type, where).toBe('invalid_request_error');
        expect(body.error.message, where).toBe(`Invalid value for '${c.param}': control characters are not allowed.`);
        await expectUntouched();
      }),
      runs(100),
    );
    await expectServing();
    expectNoServerErrors();
  }, 120000);

  it('responses with store: false relay a NUL to the vendor as it is (nothing to store)', async () => {
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: canary.key, maxRetries: 0 });
    const r = await client.responses.create({ model: 'sim/echo', input: 'um\u0000dois', store: false });
    expect(r.output_text).toBe('um\u0000dois');
  }, 30000);

  it('read routes: an id or query value with control characters, or a malformed escape, is a 400 naming it', async () => {
    const get = (method: string, path: string) => rawRequest({ port, method, path, headers: [['authorization', `Bearer ${fuzzed.key}`]], timeoutMs: 20000 });
    const reads: Array<[string, (v: string) => string, string]> = [
      ['GET', (v) => `/v1/generation?id=${v}`, 'id'],
      ['GET', (v) => `/v1/responses/${v}`, 'id'],
      ['DEL', (v) => `/v1/responses/${v}`, 'id'],
      ['GET', (v) => `/v1/responses/${v}/input_items`, 'id'],
      ['GET', (v) => `/v1/responses/resp_x/input_items?after=${v}`, 'after'],
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...reads), control, async ([method, path, param], v) => {
        const r = await get(method === 'DEL' ? 'DELETE' : method, path(encodeURIComponent(v)));
        expect(expectDocumented4xx(r, ['invalid_request'])).toBe('invalid_request');
        expect((r.json as { error: { param: string } }).error.param).toBe(param);
      }),
      runs(60),
    );
    // a malformed escape once crashed the front door before the key was even checked (a URIError in the handler)
    const anonymous = await rawRequest({ port, method: 'GET', path: '/v1/responses/resp_%E0%A4%A', timeoutMs: 20000 });
    expectDocumented4xx(anonymous, ['missing_api_key']);
    expect(stack.gateways[0].child.exitCode).toBe(null);
    for (const bad of ['%E0%A4%A', '%', '%zz']) {
      const r = await get('GET', `/v1/responses/resp_${bad}`);
      expect(expectDocumented4xx(r, ['invalid_request'])).toBe('invalid_request');
      expect((r.json as { error: { param: string } }).error.param).toBe('id');
    }
    await expectUntouched();
    await expectServing();
    expectNoServerErrors();
  }, 60000);
});

describe('slow senders', () => {
  it('slow-loris headers and trickled bodies are cut off without delaying anyone else', async () => {
    const head = (len: number) =>
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${fuzzed.key}\r\ncontent-type: application/json\r\ncontent-length: ${len}\r\n\r\n`;
    const json = JSON.stringify(validBody());
    const loris = Array.from({ length: 20 }, () =>
      trickle({ port, data: Buffer.from(head(json.length) + json), sliceBytes: 1, intervalMs: 400, maxMs: 30000 }),
    );
    // headers complete, body trickled 10 bytes per 500 ms (uWS's idle timeout restarts with each chunk)
    const bodies = Array.from({ length: 5 }, () =>
      trickle({ port, data: Buffer.from(head(json.length) + json), sliceBytes: 10, intervalMs: 500, maxMs: 30000, startBytes: head(json.length).length }),
    );
    // control bytes in a header (a key with NUL in it): uWS's parser never sees the request end and
    // closes the connection at its idle timeout, answering nothing; nothing reaches catraca
    const withNul = (i: number) =>
      Buffer.concat([Buffer.from(`Bearer ${fuzzed.key.slice(0, i)}`), Buffer.from([i % 2 ? 0 : 1]), Buffer.from(fuzzed.key.slice(i))]);
    const nuls = [0, 7, 12, 20, fuzzed.key.length].map((i) =>
      rawRequest({
        port,
        headers: [
          ['authorization', withNul(i)],
          ['content-type', 'application/json'],
        ],
        body: json,
        timeoutMs: 20000,
      }),
    );
    // meanwhile every other client is served promptly
    const client = new OpenAI({ baseURL: stack.baseUrl, apiKey: canary.key, maxRetries: 0 });
    for (let i = 0; i < 10; i++) {
      const t0 = Date.now();
      const c = await client.chat.completions.create({ model: 'sim/echo', messages: [{ role: 'user', content: `ping ${i}` }], max_tokens: 5 });
      expect(c.choices[0].message.content).toBe(`ping ${i}`);
      expect(Date.now() - t0).toBeLessThan(2000);
      await new Promise((r) => setTimeout(r, 300));
    }
    const l = await Promise.all(loris);
    for (const x of l) {
      expect(x.timedOut, 'header trickler closed by the server').toBe(false);
      expect(x.elapsedMs).toBeLessThan(15000); // uWS: 10 s to send the headers
      expect(x.status).toBe(0); // its request never started: nothing to answer
    }
    for (const x of await Promise.all(nuls)) expectDocumented4xx(x, [], { allowClosed: true });
    const b = await Promise.all(bodies);
    for (const x of b) {
      expect(x.timedOut, 'body trickler closed by the server').toBe(false);
      expectDocumented4xx(x, ['request_timeout']);
      expect(x.elapsedMs).toBeLessThan(BODY_TIMEOUT_MS + 3000);
      expect(x.sentBytes).toBeLessThan(Buffer.byteLength(head(json.length) + json));
    }
    await expectUntouched();
    await expectServing();
    expectNoServerErrors();
  }, 60000);
});

describe('json-depth scanner', () => {
  it('agrees with JSON.parse on depth for random JSON, and never reads inside strings', () => {
    const depthOf = (v: unknown): number => (v !== null && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v as object).map(depthOf)) : 0);
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 12 }), fc.integer({ min: 1, max: 12 }), (v, max) => {
        const text = JSON.stringify(v);
        const p = scanJson(Buffer.from(text), max);
        expect(p?.kind === 'too_deep').toBe(depthOf(v) > max);
      }),
      { numRuns: 500, seed: SEED },
    );
    expect(scanJson(Buffer.from(JSON.stringify({ s: '[[[[{{{{\\"[[[' })), 2)).toBe(null);
    expect(scanJson(Buffer.from('{"a":"\\\\"}'), 1)).toBe(null);
    expect(scanJson(Buffer.from('[1e308,-1e308,1.7976931348623157e308]'))).toBe(null);
    expect(scanJson(Buffer.from('[1.8e308]'))).toEqual({ kind: 'number_out_of_range', literal: '1.8e308' });
  });
});
