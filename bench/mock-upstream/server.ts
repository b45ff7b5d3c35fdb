import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { promptTokens } from '../../src/providers/sim/tokens.ts';
import { handleAnthropic, type MockUsageEntry } from './anthropic.ts';
import { type BatchTiming, MockBatches, newBatchStats } from './batch.ts';
import { handleCompletions } from './openai-completions.ts';
import { handleEmbeddings } from './openai-embeddings.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS, mockToken } from './content.ts';
import type { MockStats } from './stats.ts';
import { toolLoopCall } from './tool-loop.ts';

export type { MockStats } from './stats.ts';

// An OpenAI-compatible mock vendor for tests and benchmarks. Speaks OpenAI's wire format exactly
// (chat.completion / chat.completion.chunk, usage chunk with choices [] when
// stream_options.include_usage, `data: [DONE]`, OpenAI error bodies). Cheap on purpose: node:http,
// keep-alive, strings prebuilt per request, no validation library on the hot path.
//
// Output: token i is "Hello" for i = 0 and then " world", " foo", … cycling through WORDS;
// the natural length is `outputTokens` (default 16), cut at max_tokens / max_completion_tokens
// (finish_reason "length"). prompt_tokens uses the sim's documented count (src/providers/sim).
//
// Behaviour by request model name:
//   mock-429 → 429 rate_limit_exceeded, retry-after: 1     mock-500 → 500 server_error
//   mock-401 → 401 invalid_api_key (echoes a masked key)   mock-404 → 404 model_not_found
//   mock-400 → 400 invalid_request_error (param max_tokens)
//   mock-context → 400 context_length_exceeded                mock-hang → takes the request, never answers
//   mock-fail-midstream → 3 content chunks, then the socket is destroyed
//   mock-no-usage → never sends usage                      mock-slow → 500 ms first token, 20 tokens/s
//   mock-accept-hang → 200 and its headers at once, then nothing (accepted, never a byte)
//   mock-slow-start → streamed: 200 and its headers at once, the first chunk after SLOW_START_MS
//     (a vendor that accepted the request but is slow to its first byte); not streamed: the whole
//     answer after SLOW_START_MS
//   POST /v1/messages with model mock-claude-signature-fail → a thinking block's signature (and
//     nothing else), then the socket is destroyed: a frame reached the client before the failure
//   POST /v1/messages, /v1/messages/count_tokens → Anthropic's Messages API (see anthropic.ts)
//   POST /v1/embeddings, /v1/completions → OpenAI's embeddings and legacy completions
//     (openai-embeddings.ts, openai-completions.ts)
//   mock-reasoning → reasoning pieces (MOCK_REASONING) before the answer
//   mock-tools → one tool call (MOCK_TOOL_CALL), finish_reason "tool_calls", 12 completion tokens
//   mock-tool-loop → calls a tool it was offered (see tool-loop.ts) until the last message is a
//     tool result, then answers normally: an agent's round trip
//   mock-agent → like mock-tools, unless the last message is a tool result: then the normal answer
//   mock-split-utf8 → ignores stream: true and answers one chat.completion whose content is
//     MOCK_SPLIT_TEXT, written in two pieces that split the "ç" (as a vendor's TCP segments may)
//   mock-400-utf8 → 400 whose message (MOCK_SPLIT_ERROR) is written split inside a character
// Any other model streams normally. Missing `Authorization: Bearer …` → 401.
// Billing as OpenAI bills (prompt_tokens is everything the vendor charges as input):
//   text     the sim's documented count of the messages' text (src/providers/sim)
//   images   MOCK_IMAGE_TOKENS per image_url part (gpt-4o-mini at high detail, 2 × 2 tiles)
//   tools    ceil(bytes of the tools JSON / 3) + 20 per request with tools
//   cache    with a prompt_cache_key, half the prompt is reported as cached_tokens (still part of
//            prompt_tokens, as OpenAI reports it)
//   reasoning counted in completion_tokens and in completion_tokens_details.reasoning_tokens
// A parameter OpenAI does not document → 400 "Unrecognized request argument supplied: …", as
// OpenAI answers; reasoning_effort to a model that does not reason (no "reasoning" in its name) →
// 400 unsupported_parameter, as OpenAI answers for gpt-4o. Per-request override (the mock's own parameter; a gateway must be told to
// forward it, e.g. the catalog's extra_params):
//   "mock": { "output_tokens"?: n, "first_token_ms"?: n, "tokens_per_second"?: n }

export interface MockUpstreamOptions {
  port?: number;
  host?: string;
  firstTokenMs?: number;
  /** 0 = write the whole answer at once */
  tokensPerSecond?: number;
  outputTokens?: number;
  /** the batch APIs' timing (batch.ts): ms before a batch starts, before each line, before it ends; default 0 */
  batch?: Partial<BatchTiming>;
}

export interface MockUpstream {
  /** ends with /v1 */
  url: string;
  port: number;
  stats: MockStats;
  /** the batch APIs' timing, changed at run time by tests (batch.ts) */
  batchTiming: BatchTiming;
  close(): Promise<void>;
}

/** Prompt tokens the mock bills per image part, as gpt-4o-mini does for a high-detail 2 × 2-tile image (2 833 + 4 × 5 667). */
export const MOCK_IMAGE_TOKENS = 25_501;

// OpenAI's documented chat-completions request fields; anything else is refused as OpenAI does.
// The gateway's rules (src/chat/params.ts) are checked against this list in server.test.ts.
export const OPENAI_PARAMS = new Set([
  'model',
  'messages',
  'stream',
  'stream_options',
  'max_tokens',
  'max_completion_tokens',
  'n',
  'temperature',
  'top_p',
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'logprobs',
  'top_logprobs',
  'seed',
  'stop',
  'response_format',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'reasoning_effort',
  'verbosity',
  'metadata',
  'store',
  'prompt_cache_key',
  'safety_identifier',
  'service_tier',
  'functions',
  'function_call',
  'modalities',
  'audio',
  'prediction',
  'web_search_options',
  'mock',
]);

/** What the mock bills as prompt tokens (see the header). */
export function mockPromptTokens(body: Record<string, unknown>): number {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  let n = promptTokens(messages);
  for (const m of messages as Array<{ content?: unknown }>) {
    if (Array.isArray(m?.content)) for (const p of m.content as Array<{ type?: unknown }>) if (p?.type === 'image_url') n += MOCK_IMAGE_TOKENS;
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) n += Math.ceil(Buffer.byteLength(JSON.stringify(body.tools)) / 3) + 20;
  return n;
}

export const MOCK_SPLIT_TEXT = 'Informação e ação';
export const MOCK_SPLIT_ERROR = 'Parâmetro inválido: ação';

/** Writes `body` in two pieces cut inside its first multi-byte character, 30 ms apart. */
function sendSplit(res: http.ServerResponse, status: number, body: string): void {
  const bytes = Buffer.from(body, 'utf8');
  let cut = bytes.findIndex((b) => b >= 0x80) + 1; // after the first byte of a 2-byte character
  if (cut <= 0) cut = bytes.length >> 1;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length });
  res.write(bytes.subarray(0, cut));
  setTimeout(() => res.end(bytes.subarray(cut)), 30);
}

const SLOW = { firstTokenMs: 500, tokensPerSecond: 20 };
export const SLOW_START_MS = 3000;
const MIDSTREAM_TOKENS = 3;

const TOKEN_JSON: string[] = [];
const tokenJson = (i: number) => (TOKEN_JSON[i] ??= JSON.stringify(mockToken(i)));

const ERRORS: Record<string, { status: number; body: string; headers?: Record<string, string> }> = {
  'mock-429': {
    status: 429,
    headers: { 'retry-after': '1', 'x-ratelimit-remaining-requests': '0' },
    body: JSON.stringify({
      error: {
        message:
          'Rate limit reached for gpt-4o-mini in organization org-MockOrg123456 on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.',
        type: 'requests',
        param: null,
        code: 'rate_limit_exceeded',
      },
    }),
  },
  'mock-500': {
    status: 500,
    body: JSON.stringify({
      error: { message: 'The server had an error while processing your request. Sorry about that!', type: 'server_error', param: null, code: null },
    }),
  },
  'mock-context': {
    status: 400,
    body: JSON.stringify({
      error: {
        message:
          "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
    }),
  },
  'mock-400': {
    status: 400,
    body: JSON.stringify({
      error: {
        message: "Invalid 'max_tokens': integer below minimum value.",
        type: 'invalid_request_error',
        param: 'max_tokens',
        code: 'integer_below_min_value',
      },
    }),
  },
};

function sendJson(res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

function maskKey(key: string): string {
  return key.length <= 8 ? '***' : `${key.slice(0, 5)}${'*'.repeat(Math.min(20, key.length - 8))}${key.slice(-3)}`;
}

let seqId = 0;

function sendToolCall(
  res: http.ServerResponse,
  body: Record<string, unknown>,
  id: string,
  created: number,
  modelJson: string,
  prompt: number,
  call: { id: string; name: string; arguments: string } = MOCK_TOOL_CALL,
): void {
  const n = MOCK_TOOL_COMPLETION_TOKENS;
  const usage = `{"prompt_tokens":${prompt},"completion_tokens":${n},"total_tokens":${prompt + n}}`;
  const { id: callId, name, arguments: args } = call;
  if (body.stream !== true) {
    return sendJson(
      res,
      200,
      `{"id":"${id}","object":"chat.completion","created":${created},"model":${modelJson},"choices":[{"index":0,"message":{"role":"assistant","content":null,` +
        `"tool_calls":[{"id":"${callId}","type":"function","function":{"name":"${name}","arguments":${JSON.stringify(args)}}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],"usage":${usage}}`,
    );
  }
  const includeUsage = !!(body.stream_options && (body.stream_options as { include_usage?: unknown }).include_usage === true);
  const head = `data: {"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${modelJson},"system_fingerprint":"fp_catraca_mock","choices":[`;
  const tail = includeUsage ? ',"usage":null}\n\n' : '}\n\n';
  const third = Math.ceil(args.length / 3);
  const pieces = [args.slice(0, third), args.slice(third, 2 * third), args.slice(2 * third)];
  let out = `${head}{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"${callId}","type":"function","function":{"name":"${name}","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]${tail}`;
  for (const p of pieces)
    out += `${head}{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(p)}}}]},"logprobs":null,"finish_reason":null}]${tail}`;
  out += `${head}{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]${tail}`;
  if (includeUsage) out += `${head}],"usage":${usage}}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.end(out + 'data: [DONE]\n\n');
}

/** Anthropic's stream up to one thinking block's signature, then the connection drops (mock-claude-signature-fail). */
function signatureThenFail(res: http.ServerResponse): void {
  const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify({ type, ...(data as object) })}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  const out =
    ev('message_start', {
      message: {
        id: 'msg_mock_sigfail',
        type: 'message',
        role: 'assistant',
        model: 'mock-claude-signature-fail',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 7, output_tokens: 1 },
      },
    }) +
    ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }) +
    ev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'mock-signature-sigfail' } });
  res.write(out, () => setTimeout(() => res.socket?.destroy(), 50));
}

export async function startMockUpstream(opts: MockUpstreamOptions = {}): Promise<MockUpstream> {
  const defaults = { firstTokenMs: opts.firstTokenMs ?? 0, tokensPerSecond: opts.tokensPerSecond ?? 0, outputTokens: opts.outputTokens ?? 16 };
  const stats: MockStats = {
    requests: 0,
    completed: 0,
    aborted: 0,
    inFlight: 0,
    lastAuthorization: null,
    lastBody: null,
    lastPath: null,
    byModel: {},
    usages: [],
    batch: newBatchStats(),
  };
  const batchTiming: BatchTiming = { validateMs: 0, lineMs: 0, finalizeMs: 0, ...opts.batch };
  let origin = '';
  const batches = new MockBatches({ origin: () => origin, timing: batchTiming, stats: stats.batch });
  const record = (e: MockUsageEntry) => stats.usages.push(e);

  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/stats') return sendJson(res, 200, JSON.stringify({ ...stats, lastBody: undefined, usages: undefined }));
    stats.requests++;
    stats.inFlight++;
    stats.lastPath = path;
    let ended = false;
    res.once('finish', () => {
      ended = true;
    });
    res.once('close', () => {
      stats.inFlight--;
      if (ended) stats.completed++;
      else stats.aborted++;
    });

    if (batches.handle(req, res, path)) return;
    if (req.method === 'POST' && (path === '/v1/messages' || path === '/v1/messages/count_tokens')) {
      stats.lastAuthorization = typeof req.headers['x-api-key'] === 'string' ? `x-api-key ${req.headers['x-api-key']}` : null;
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(parts).toString('utf8');
        try {
          stats.lastBody = JSON.parse(raw);
        } catch {
          stats.lastBody = null;
        }
        const model = (stats.lastBody as { model?: unknown } | null)?.model;
        if (model === 'mock-claude-signature-fail') {
          stats.byModel[model] = (stats.byModel[model] ?? 0) + 1;
          return signatureThenFail(res);
        }
        handleAnthropic(req, res, raw, defaults.outputTokens, record, { firstTokenMs: defaults.firstTokenMs, tokensPerSecond: defaults.tokensPerSecond });
      });
      return;
    }
    const auth = req.headers.authorization;
    stats.lastAuthorization = auth ?? null;
    const key = auth && /^Bearer\s+\S+/i.test(auth) ? auth.replace(/^Bearer\s+/i, '') : null;
    if (!key) {
      req.resume();
      return sendJson(
        res,
        401,
        JSON.stringify({
          error: {
            message:
              "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            type: 'invalid_request_error',
            param: null,
            code: null,
          },
        }),
      );
    }
    if (req.method === 'GET' && path === '/v1/models') {
      req.resume();
      const now = 1700000000;
      const ids = ['mock-gpt', 'mock-slow', 'mock-no-usage', 'mock-fail-midstream', 'mock-429', 'mock-500', 'mock-401', 'mock-404', 'mock-400'];
      return sendJson(res, 200, JSON.stringify({ object: 'list', data: ids.map((id) => ({ id, object: 'model', created: now, owned_by: 'catraca-mock' })) }));
    }
    if (req.method === 'POST' && path === '/v1/embeddings') return handleEmbeddings(req, res, stats);
    if (req.method === 'POST' && path === '/v1/completions') return handleCompletions(req, res, stats, defaults.outputTokens);
    if (req.method !== 'POST' || path !== '/v1/chat/completions') {
      req.resume();
      return sendJson(
        res,
        404,
        JSON.stringify({ error: { message: `Invalid URL (${req.method} ${path})`, type: 'invalid_request_error', param: null, code: null } }),
      );
    }

    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return sendJson(
          res,
          400,
          JSON.stringify({
            error: { message: 'We could not parse the JSON body of your request.', type: 'invalid_request_error', param: null, code: null },
          }),
        );
      }
      stats.lastBody = body;
      const unknown = Object.keys(body).find((k) => !OPENAI_PARAMS.has(k));
      if (unknown) {
        return sendJson(
          res,
          400,
          JSON.stringify({
            error: { message: `Unrecognized request argument supplied: ${unknown}`, type: 'invalid_request_error', param: null, code: null },
          }),
        );
      }
      const model = typeof body.model === 'string' ? body.model : '';
      stats.byModel[model] = (stats.byModel[model] ?? 0) + 1;
      // mock-hang: takes the request and never answers (a vendor that times out)
      if (model === 'mock-hang') return;
      if (model === 'mock-accept-hang') {
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
        res.flushHeaders();
        return;
      }
      if (body.reasoning_effort != null && !model.includes('reasoning')) {
        return sendJson(
          res,
          400,
          JSON.stringify({
            error: {
              message: "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
              type: 'invalid_request_error',
              param: 'reasoning_effort',
              code: 'unsupported_parameter',
            },
          }),
        );
      }
      const fixed = ERRORS[model];
      if (fixed) return sendJson(res, fixed.status, fixed.body, fixed.headers);
      if (model === 'mock-401') {
        return sendJson(
          res,
          401,
          JSON.stringify({
            error: {
              message: `Incorrect API key provided: ${maskKey(key)}. You can find your API key at https://platform.openai.com/account/api-keys.`,
              type: 'invalid_request_error',
              param: null,
              code: 'invalid_api_key',
            },
          }),
        );
      }
      if (model === 'mock-404' || !Array.isArray(body.messages)) {
        return sendJson(
          res,
          404,
          JSON.stringify({
            error: {
              message: `The model \`${model}\` does not exist or you do not have access to it.`,
              type: 'invalid_request_error',
              param: null,
              code: 'model_not_found',
            },
          }),
        );
      }

      const cap =
        typeof body.max_completion_tokens === 'number' ? body.max_completion_tokens : typeof body.max_tokens === 'number' ? body.max_tokens : Infinity;
      const ov = (body.mock && typeof body.mock === 'object' ? body.mock : {}) as {
        output_tokens?: unknown;
        first_token_ms?: unknown;
        tokens_per_second?: unknown;
      };
      const num = (v: unknown) => (typeof v === 'number' && v >= 0 ? v : undefined);
      const natural = model === 'mock-fail-midstream' ? 1000 : (num(ov.output_tokens) ?? defaults.outputTokens);
      const n = Math.max(0, Math.min(natural, cap));
      const finish = n < natural ? 'length' : 'stop';
      const prompt = mockPromptTokens(body);
      const cached = typeof body.prompt_cache_key === 'string' ? Math.floor(prompt / 2) : 0;
      // mock-reasoning: three reasoning pieces (OpenRouter's delta.reasoning) before the answer;
      // vendors count reasoning in completion_tokens
      const reasoning = model === 'mock-reasoning' ? MOCK_REASONING : [];
      const completion = n + reasoning.length;
      const usageObj = `{"prompt_tokens":${prompt},"completion_tokens":${completion},"total_tokens":${prompt + completion},"prompt_tokens_details":{"cached_tokens":${cached},"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":${reasoning.length},"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`;
      const id = `chatcmpl-mock${(++seqId).toString(36).padStart(8, '0')}`;
      const created = Math.floor(Date.now() / 1000);
      const modelJson = JSON.stringify(model);
      const wantUsage = model !== 'mock-no-usage';
      const lastRole = (body.messages as Array<{ role?: unknown }>).at(-1)?.role;
      if (model === 'mock-tools' || (model === 'mock-agent' && lastRole !== 'tool')) {
        record({ api: 'chat', model, usage: { prompt_tokens: prompt, completion_tokens: MOCK_TOOL_COMPLETION_TOKENS, cached_tokens: 0 } });
        return sendToolCall(res, body, id, created, modelJson, prompt);
      }
      const loopCall = model === 'mock-tool-loop' ? toolLoopCall(body) : null;
      if (loopCall) return sendToolCall(res, body, id, created, modelJson, prompt, loopCall);
      if (wantUsage) record({ api: 'chat', model, usage: { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached } });
      if (model === 'mock-400-utf8') {
        return sendSplit(res, 400, JSON.stringify({ error: { message: MOCK_SPLIT_ERROR, type: 'invalid_request_error', param: null, code: null } }));
      }
      if (model === 'mock-split-utf8') {
        return sendSplit(
          res,
          200,
          JSON.stringify({
            id,
            object: 'chat.completion',
            created,
            model,
            choices: [{ index: 0, message: { role: 'assistant', content: MOCK_SPLIT_TEXT, refusal: null }, logprobs: null, finish_reason: 'stop' }],
            usage: { prompt_tokens: prompt, completion_tokens: 3, total_tokens: prompt + 3 },
          }),
        );
      }

      if (body.stream !== true) {
        let content = '';
        for (let i = 0; i < n; i++) content += mockToken(i);
        const out =
          `{"id":"${id}","object":"chat.completion","created":${created},"model":${modelJson},"choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(content)},${reasoning.length ? `"reasoning":${JSON.stringify(reasoning.join(''))},` : ''}"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"${finish}"}]` +
          (wantUsage ? `,"usage":${usageObj}` : '') +
          `,"service_tier":"default","system_fingerprint":"fp_catraca_mock"}`;
        if (model === 'mock-slow-start') return void setTimeout(() => !res.destroyed && sendJson(res, 200, out), SLOW_START_MS);
        return sendJson(res, 200, out);
      }

      const includeUsage = wantUsage && !!(body.stream_options && (body.stream_options as { include_usage?: unknown }).include_usage === true);
      const usageTail = includeUsage ? ',"usage":null}\n\n' : '}\n\n';
      const head = `data: {"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${modelJson},"service_tier":"default","system_fingerprint":"fp_catraca_mock","choices":[`;
      const first =
        `${head}{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]${usageTail}` +
        reasoning.map((r) => `${head}{"index":0,"delta":{"reasoning":${JSON.stringify(r)}},"logprobs":null,"finish_reason":null}]${usageTail}`).join('');
      const tok = (i: number) => `${head}{"index":0,"delta":{"content":${tokenJson(i)}},"logprobs":null,"finish_reason":null}]${usageTail}`;
      const last =
        `${head}{"index":0,"delta":{},"logprobs":null,"finish_reason":"${finish}"}]${usageTail}` +
        (includeUsage ? `${head}],"usage":${usageObj}}\n\n` : '') +
        'data: [DONE]\n\n';

      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-request-id': `req_${id}` });
      const slow = model === 'mock-slow';
      const slowStart = model === 'mock-slow-start';
      if (slowStart) res.flushHeaders();
      const firstMs = num(ov.first_token_ms) ?? (slow ? SLOW.firstTokenMs : slowStart ? SLOW_START_MS : defaults.firstTokenMs);
      const tps = num(ov.tokens_per_second) ?? (slow ? SLOW.tokensPerSecond : defaults.tokensPerSecond);

      if (model === 'mock-fail-midstream') {
        let s = first;
        for (let i = 0; i < MIDSTREAM_TOKENS; i++) s += tok(i);
        res.write(s, () => setTimeout(() => res.socket?.destroy(), 20));
        return;
      }

      let closed = false;
      res.once('close', () => {
        closed = true;
      });
      if (firstMs === 0 && tps === 0) {
        let s = first;
        for (let i = 0; i < n; i++) s += tok(i);
        res.end(s + last);
        return;
      }
      const interval = tps > 0 ? 1000 / tps : 0;
      let i = 0;
      let t0 = 0;
      const step = () => {
        if (closed) return;
        // Catch up on every token due by now (timers are coarse at high rates).
        const due = interval === 0 ? n : Math.min(n, Math.floor((Date.now() - t0) / interval) + 1);
        let s = '';
        while (i < due) s += tok(i++);
        if (i >= n) return void res.end(s + last);
        if (s) res.write(s);
        setTimeout(step, Math.max(1, t0 + i * interval - Date.now()));
      };
      setTimeout(() => {
        if (closed) return;
        res.write(first);
        t0 = Date.now();
        step();
      }, firstMs);
    });
  });
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = opts.host && opts.host !== '0.0.0.0' ? opts.host : '127.0.0.1';
  origin = `http://${host}:${port}`;
  return {
    url: `http://${host}:${port}/v1`,
    port,
    stats,
    batchTiming,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
