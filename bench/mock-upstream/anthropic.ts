import { createHash } from 'node:crypto';
import type http from 'node:http';
import { countTokens } from '../../src/providers/sim/tokens.ts';
import { MOCK_REASONING, MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS, mockToken } from './content.ts';

// Anthropic's Messages API, as the mock vendor speaks it: POST /v1/messages and
// /v1/messages/count_tokens with x-api-key and anthropic-version, SSE events message_start /
// content_block_start / ping / content_block_delta (text_delta, thinking_delta, signature_delta,
// input_json_delta) / content_block_stop / message_delta (stop_reason, stop_sequence, cumulative
// usage as MessageDeltaUsage: input, cache read and cache write counts, no cache_creation split) /
// message_stop, and Anthropic's error bodies. Output is the same word sequence as the
// OpenAI mock. It refuses what Anthropic refuses:
//   an unknown top-level field      400 "<field>: Extra inputs are not permitted" (also
//                                   context_management without the context-management beta,
//                                   output_config.effort without the effort beta)
//   no max_tokens                   400 "max_tokens: Field required"
//   a tool id not ^[a-zA-Z0-9_-]+$  400; a tool_use without its tool_result in the next turn, 400
//   a thinking block whose signature the mock did not issue for that text  400 "Invalid signature"
// Billing (input_tokens, the same number count_tokens answers):
//   3 per request + 3 per message + the sim's word count of every text (system, text blocks,
//   tool_use input JSON, tool_result text, thinking) + MOCK_CLAUDE_IMAGE_TOKENS per image +
//   ceil(bytes of each tool's JSON / 3) + 20 when there are tools.
//   Cache: each block carrying cache_control ends a cacheable prefix (tools, then system, then
//   messages: Anthropic's order). The longest prefix an earlier request cached is read
//   (cache_read_input_tokens); the rest up to the last marker is written
//   (cache_creation_input_tokens, each stretch in the lifetime of the marker ending it: ttl "1h"
//   or 5 minutes); input_tokens is what follows the last marker. No minimum cacheable length.
//   Thinking and output are billed as output_tokens.
// Models:
//   mock-claude → normal answer (16 tokens, cut at max_tokens → stop_reason max_tokens; a stop
//     sequence stops the output before the token that would start it → stop_reason stop_sequence)
//   mock-claude-thinking → with `thinking` enabled or adaptive: a thinking block (MOCK_REASONING,
//     or "" with display "omitted") signed by the mock, then the answer
//   mock-claude-agent → a tool_use of MOCK_TOOL_CALL unless the last turn carries tool results,
//     then the answer
//   mock-claude-slow → the answer at 20 tokens/s after 100 ms (200 tokens)
//   mock-claude-overloaded → HTTP 529 overloaded_error
//   mock-claude-midstream-error → 3 text deltas, then an `event: error` overloaded_error
//   mock-claude-tools → a text block "Checking." then a tool_use block (MOCK_TOOL_CALL's name and
//     input, streamed as input_json_delta pieces), stop_reason tool_use, fixed usage

export const MOCK_CLAUDE_IMAGE_TOKENS = 1_600;
const TOOL_ID = /^[a-zA-Z0-9_-]+$/;
const FIELDS = new Set([
  'model',
  'messages',
  'max_tokens',
  'system',
  'metadata',
  'stop_sequences',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
  'container',
  'mcp_servers',
  'context_management',
  'output_config',
  'output_format',
  'cache_control',
]);
const COUNT_FIELDS = new Set([
  'model',
  'messages',
  'system',
  'cache_control',
  'tools',
  'tool_choice',
  'thinking',
  'context_management',
  'output_config',
  'output_format',
  'mcp_servers',
]);

type Block = Record<string, unknown> & { type?: string };
type Body = Record<string, unknown> & { model?: string; max_tokens?: number; messages?: Array<{ role?: string; content?: unknown }>; stream?: boolean };

export interface AnthropicUsageRecord {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
}

/** What the mock billed one request: recorded so tests can add up what a client's calls cost. */
export type MockUsageEntry =
  | { api: 'messages'; model: string; usage: AnthropicUsageRecord }
  | { api: 'count_tokens'; model: string; input_tokens: number }
  | { api: 'chat'; model: string; usage: { prompt_tokens: number; completion_tokens: number; cached_tokens: number } };

const err = (type: string, message: string) => JSON.stringify({ type: 'error', error: { type, message } });
const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

let seq = 0;
/** signature → the thinking text it was issued for */
const issued = new Map<string, string>();
/** cacheable prefixes already written */
const cached = new Set<string>();

export function mockSignature(thinking: string): string {
  const sig = `mocksig_${createHash('sha256').update(`mock-anthropic:${thinking}:${++seq}`).digest('base64')}`;
  issued.set(sig, thinking);
  return sig;
}

/** One piece of the prompt in Anthropic's order, with its tokens and cache marker. */
interface Segment {
  tokens: number;
  key: string;
  ttl?: string;
}

function blockTokens(b: Block): number {
  switch (b.type) {
    case 'text':
      return countTokens(String(b.text ?? ''));
    case 'tool_use':
      return countTokens(JSON.stringify(b.input ?? {}));
    case 'tool_result':
      return typeof b.content === 'string'
        ? countTokens(b.content)
        : Array.isArray(b.content)
          ? (b.content as Block[]).reduce((n, c) => n + blockTokens(c), 0)
          : 0;
    case 'thinking':
      return countTokens(String(b.thinking ?? ''));
    case 'image':
      return MOCK_CLAUDE_IMAGE_TOKENS;
    default:
      return 0;
  }
}

const ttlOf = (b: Block) => {
  const cc = b.cache_control as { ttl?: unknown } | undefined;
  return cc ? (cc.ttl === '1h' ? '1h' : '5m') : undefined;
};

function segments(body: Body): Segment[] {
  const out: Segment[] = [];
  for (const t of (Array.isArray(body.tools) ? body.tools : []) as Block[]) {
    out.push({ tokens: Math.ceil(Buffer.byteLength(JSON.stringify(t)) / 3), key: JSON.stringify(t), ttl: ttlOf(t) });
  }
  if (typeof body.system === 'string') out.push({ tokens: countTokens(body.system), key: body.system });
  else if (Array.isArray(body.system)) for (const b of body.system as Block[]) out.push({ tokens: blockTokens(b), key: JSON.stringify(b), ttl: ttlOf(b) });
  for (const m of body.messages ?? []) {
    if (typeof m.content === 'string') out.push({ tokens: countTokens(m.content), key: m.content });
    else if (Array.isArray(m.content)) for (const b of m.content as Block[]) out.push({ tokens: blockTokens(b), key: JSON.stringify(b), ttl: ttlOf(b) });
  }
  return out;
}

/** What the mock bills as input for `body` (see the header), all of it, cache reads and writes included. */
export function mockClaudePromptTokens(body: Body): number {
  const tools = Array.isArray(body.tools) && body.tools.length > 0 ? 20 : 0;
  return 3 + 3 * (body.messages?.length ?? 0) + tools + segments(body).reduce((n, s) => n + s.tokens, 0);
}

/**
 * The prompt's usage. Each cache_control marker ends a cacheable prefix; the longest prefix
 * already cached is read, the rest up to the last marker is written (each stretch in the lifetime
 * of the marker that ends it), and every marker's prefix is cached from then on.
 */
function inputUsage(body: Body): Omit<AnthropicUsageRecord, 'output_tokens'> {
  const total = mockClaudePromptTokens(body);
  const segs = segments(body);
  const usage = {
    input_tokens: total,
    cache_read_input_tokens: 0,
    cache_creation_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
  };
  const keys: string[] = [];
  const ends: Array<{ at: number; tokens: number; ttl: string; key: string }> = [];
  let tokens = 0;
  segs.forEach((seg, i) => {
    tokens += seg.tokens;
    keys.push(seg.key);
    if (seg.ttl)
      ends.push({
        at: i,
        tokens,
        ttl: seg.ttl,
        key: createHash('sha256')
          .update(JSON.stringify([body.model, keys]))
          .digest('hex'),
      });
  });
  if (!ends.length) return usage;
  let read = 0;
  for (const e of ends) if (cached.has(e.key)) read = e.tokens;
  let done = read;
  for (const e of ends) {
    if (e.tokens <= done) continue;
    if (e.ttl === '1h') usage.cache_creation.ephemeral_1h_input_tokens += e.tokens - done;
    else usage.cache_creation.ephemeral_5m_input_tokens += e.tokens - done;
    done = e.tokens;
  }
  for (const e of ends) cached.add(e.key);
  usage.cache_read_input_tokens = read;
  usage.cache_creation_input_tokens = done - read;
  usage.input_tokens = total - done;
  return usage;
}

/** Anthropic's refusals of a request body (see the header); null when it is one Anthropic would take. */
function refusal(body: Body, betas: string[], count: boolean): string | null {
  const allowed = count ? COUNT_FIELDS : FIELDS;
  for (const k of Object.keys(body)) if (!allowed.has(k)) return `${k}: Extra inputs are not permitted`;
  if (body.context_management !== undefined && !betas.includes('context-management-2025-06-27')) return 'context_management: Extra inputs are not permitted';
  const effort = (body.output_config as { effort?: unknown } | undefined)?.effort;
  if (effort !== undefined && !betas.includes('effort-2025-11-24')) return 'output_config.effort: Extra inputs are not permitted';
  if (!count && typeof body.max_tokens !== 'number') return 'max_tokens: Field required';
  if (!Array.isArray(body.messages)) return 'messages: Field required';
  return messagesRefusal(body.messages);
}

function messagesRefusal(messages: Array<{ role?: string; content?: unknown }>): string | null {
  for (let i = 0; i < messages.length; i++) {
    const blocks = Array.isArray(messages[i].content) ? (messages[i].content as Block[]) : [];
    for (let j = 0; j < blocks.length; j++) {
      const b = blocks[j];
      const id = b.type === 'tool_use' ? b.id : b.type === 'tool_result' ? b.tool_use_id : undefined;
      if (id !== undefined && !TOOL_ID.test(String(id))) return `messages.${i}.content.${j}.${b.type}.id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
      if (b.type === 'thinking') {
        const text = issued.get(String(b.signature));
        if (text === undefined || (b.thinking !== '' && b.thinking !== text)) return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
      }
    }
    const uses = blocks.filter((b) => b.type === 'tool_use').map((b) => String(b.id));
    if (uses.length === 0) continue;
    const next = messages[i + 1];
    const results = Array.isArray(next?.content) ? (next.content as Block[]).filter((b) => b.type === 'tool_result').map((b) => String(b.tool_use_id)) : [];
    const missing = uses.filter((u) => !results.includes(u));
    if (next && missing.length)
      return `messages.${i + 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
  }
  return null;
}

const betasOf = (req: http.IncomingMessage) =>
  String(req.headers['anthropic-beta'] ?? '')
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);

export function handleAnthropic(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  raw: string,
  outputTokens: number,
  record?: (e: MockUsageEntry) => void,
  pacing: Pacing = { firstTokenMs: 0, tokensPerSecond: 0 },
): void {
  const send = (status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  if (!req.headers['x-api-key']) return send(401, err('authentication_error', 'x-api-key header is required'));
  if (!req.headers['anthropic-version']) return send(400, err('invalid_request_error', 'anthropic-version header is required'));
  let body: Body;
  try {
    body = JSON.parse(raw);
  } catch {
    return send(400, err('invalid_request_error', 'invalid JSON'));
  }
  const count = (req.url ?? '').split('?')[0].endsWith('/count_tokens');
  const refused = refusal(body, betasOf(req), count);
  if (refused) return send(400, err('invalid_request_error', refused));
  if (count) {
    const input_tokens = mockClaudePromptTokens(body);
    record?.({ api: 'count_tokens', model: String(body.model), input_tokens });
    return send(200, JSON.stringify({ input_tokens }));
  }
  if (body.model === 'mock-claude-overloaded') return send(529, err('overloaded_error', 'Overloaded'));
  if (body.model === 'mock-claude-tools') return toolUse(res, body, send);
  answer(res, body, outputTokens, send, record, pacing);
}

/** The output of a normal answer: tokens up to max_tokens, or up to a stop sequence. */
function generate(natural: number, maxTokens: number, stops: string[]): { text: string[]; stop: string; sequence: string | null; tokens: number } {
  const text: string[] = [];
  let so = '';
  for (let i = 0; i < Math.min(natural, maxTokens); i++) {
    const next = so + mockToken(i);
    for (const s of stops) {
      const at = next.indexOf(s);
      if (s && at >= 0) {
        if (at > so.length) text.push(next.slice(so.length, at));
        return { text, stop: 'stop_sequence', sequence: s, tokens: i + 1 };
      }
    }
    text.push(mockToken(i));
    so = next;
  }
  return { text, stop: natural > maxTokens ? 'max_tokens' : 'end_turn', sequence: null, tokens: text.length };
}

interface Planned {
  blocks: Array<{ start: Block; deltas: Block[] }>;
  stop: string;
  sequence: string | null;
  outputTokens: number;
}

function lastTurnHasResults(body: Body): boolean {
  const last = body.messages?.[body.messages.length - 1];
  return Array.isArray(last?.content) && (last.content as Block[]).some((b) => b.type === 'tool_result');
}

/** The blocks of the answer for this model and request. */
function plan(body: Body, outputTokens: number): Planned {
  const model = String(body.model);
  if (model === 'mock-claude-agent' && !lastTurnHasResults(body)) {
    const args = MOCK_TOOL_CALL.arguments;
    const third = Math.ceil(args.length / 3);
    const pieces = [args.slice(0, third), args.slice(third, 2 * third), args.slice(2 * third)];
    return {
      blocks: [
        {
          start: { type: 'tool_use', id: `toolu_mock${(++seq).toString(36)}`, name: MOCK_TOOL_CALL.name, input: {} },
          deltas: pieces.map((p) => ({ type: 'input_json_delta', partial_json: p })),
        },
      ],
      stop: 'tool_use',
      sequence: null,
      outputTokens: MOCK_TOOL_COMPLETION_TOKENS,
    };
  }
  const natural = model === 'mock-claude-midstream-error' ? 1000 : model === 'mock-claude-slow' ? 200 : outputTokens;
  const out = generate(natural, body.max_tokens as number, Array.isArray(body.stop_sequences) ? (body.stop_sequences as string[]) : []);
  const blocks: Planned['blocks'] = [];
  let outputTokensBilled = out.tokens;
  const thinking = (body.thinking as { type?: unknown; display?: unknown } | undefined) ?? {};
  if (model === 'mock-claude-thinking' && (thinking.type === 'enabled' || thinking.type === 'adaptive')) {
    const full = MOCK_REASONING.join('');
    const shown = thinking.display === 'omitted' ? [] : MOCK_REASONING;
    blocks.push({
      start: { type: 'thinking', thinking: '', signature: '' },
      deltas: [...shown.map((t) => ({ type: 'thinking_delta', thinking: t })), { type: 'signature_delta', signature: mockSignature(full) }],
    });
    outputTokensBilled += MOCK_REASONING.length;
  }
  if (out.text.length) blocks.push({ start: { type: 'text', text: '' }, deltas: out.text.map((t) => ({ type: 'text_delta', text: t })) });
  return { blocks, stop: out.stop, sequence: out.sequence, outputTokens: outputTokensBilled };
}

/** The whole Message of a plan (not streamed). */
function wholeContent(p: Planned): Block[] {
  return p.blocks.map(({ start, deltas }) => {
    const b: Block = { ...start };
    for (const d of deltas) {
      if (d.type === 'text_delta') b.text = String(b.text) + String(d.text);
      else if (d.type === 'thinking_delta') b.thinking = String(b.thinking) + String(d.thinking);
      else if (d.type === 'signature_delta') b.signature = d.signature;
      else if (d.type === 'input_json_delta') b._json = String(b._json ?? '') + String(d.partial_json);
    }
    if (b._json !== undefined) {
      b.input = JSON.parse(String(b._json));
      delete b._json;
    }
    return b;
  });
}

/** The OpenAI mock's pacing (its --first-token-ms and --tokens-per-second), for streamed answers of the ordinary models. */
export interface Pacing {
  firstTokenMs: number;
  tokensPerSecond: number;
}

function answer(
  res: http.ServerResponse,
  body: Body,
  outputTokens: number,
  send: (s: number, b: string) => void,
  record: ((e: MockUsageEntry) => void) | undefined,
  pacing: Pacing,
): void {
  const p = plan(body, outputTokens);
  const input = inputUsage(body);
  const usage: AnthropicUsageRecord = { ...input, output_tokens: p.outputTokens };
  record?.({ api: 'messages', model: String(body.model), usage });
  const id = `msg_mock${(++seq).toString(36).padStart(8, '0')}`;
  const message = { id, type: 'message', role: 'assistant', model: body.model };
  if (body.stream !== true) {
    return send(200, JSON.stringify({ ...message, content: wholeContent(p), stop_reason: p.stop, stop_sequence: p.sequence, usage }));
  }
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  const head = sse('message_start', {
    type: 'message_start',
    message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...input, output_tokens: 1 } },
  });
  const events: string[] = [];
  p.blocks.forEach(({ start, deltas }, index) => {
    events.push(sse('content_block_start', { type: 'content_block_start', index, content_block: start }));
    if (index === 0) events.push(sse('ping', { type: 'ping' }));
    for (const delta of deltas) events.push(sse('content_block_delta', { type: 'content_block_delta', index, delta }));
    events.push(sse('content_block_stop', { type: 'content_block_stop', index }));
  });
  if (body.model === 'mock-claude-midstream-error') {
    res.end(head + events.slice(0, 5).join('') + sse('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }));
    return;
  }
  // message_delta's usage is Anthropic's MessageDeltaUsage: the cumulative counts, without the
  // cache_creation lifetime split (that is only in message_start's Message.usage)
  const tail =
    sse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: p.stop, stop_sequence: p.sequence },
      usage: {
        input_tokens: input.input_tokens,
        cache_creation_input_tokens: input.cache_creation_input_tokens,
        cache_read_input_tokens: input.cache_read_input_tokens,
        output_tokens: p.outputTokens,
      },
    }) + sse('message_stop', { type: 'message_stop' });
  if (body.model === 'mock-claude-slow') return paced(res, head, events, tail);
  if (pacing.firstTokenMs > 0 || pacing.tokensPerSecond > 0) return pacedTokens(res, head, events, tail, pacing);
  res.end(head + events.join('') + tail);
}

/**
 * As the OpenAI mock streams: message_start after the first-token wait, then one content_block_delta
 * per token at the given rate (the events between deltas go with the next one), every token due by
 * now written at once (timers are coarse at high rates); the end with the last token.
 */
function pacedTokens(res: http.ServerResponse, head: string, events: string[], tail: string, pacing: Pacing): void {
  const units: string[] = [];
  let pending = '';
  for (const e of events) {
    pending += e;
    if (e.startsWith('event: content_block_delta')) {
      units.push(pending);
      pending = '';
    }
  }
  const last = pending + tail;
  let closed = false;
  res.once('close', () => {
    closed = true;
  });
  const interval = pacing.tokensPerSecond > 0 ? 1000 / pacing.tokensPerSecond : 0;
  let i = 0;
  let t0 = 0;
  const step = () => {
    if (closed) return;
    const due = interval === 0 ? units.length : Math.min(units.length, Math.floor((Date.now() - t0) / interval) + 1);
    let s = '';
    while (i < due) s += units[i++];
    if (i >= units.length) return void res.end(s + last);
    if (s) res.write(s);
    setTimeout(step, Math.max(1, t0 + i * interval - Date.now()));
  };
  setTimeout(() => {
    if (closed) return;
    res.write(head);
    t0 = Date.now();
    step();
  }, pacing.firstTokenMs);
}

/** mock-claude-slow: the first event after 100 ms, then one event every 50 ms; stops when the client leaves. */
function paced(res: http.ServerResponse, head: string, events: string[], tail: string): void {
  let closed = false;
  res.once('close', () => {
    closed = true;
  });
  let i = 0;
  const step = () => {
    if (closed) return;
    if (i >= events.length) return void res.end(tail);
    res.write(events[i++]);
    setTimeout(step, 50);
  };
  setTimeout(() => {
    if (closed) return;
    res.write(head);
    step();
  }, 100);
}

const TOOL_USE_ID = 'toolu_mock_weather_1';

function toolUse(res: http.ServerResponse, body: Body, send: (status: number, body: string) => void): void {
  const input = JSON.parse(MOCK_TOOL_CALL.arguments) as Record<string, unknown>;
  const id = `msg_mock${(++seq).toString(36).padStart(8, '0')}`;
  const usage = { input_tokens: 20, output_tokens: MOCK_TOOL_COMPLETION_TOKENS };
  if (body.stream !== true) {
    return send(
      200,
      JSON.stringify({
        id,
        type: 'message',
        role: 'assistant',
        model: body.model,
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage,
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: TOOL_USE_ID, name: MOCK_TOOL_CALL.name, input },
        ],
      }),
    );
  }
  const args = MOCK_TOOL_CALL.arguments;
  const third = Math.ceil(args.length / 3);
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  let out = sse('message_start', {
    type: 'message_start',
    message: {
      id,
      type: 'message',
      role: 'assistant',
      model: body.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 20, output_tokens: 1 },
    },
  });
  out += sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
  out += sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Checking.' } });
  out += sse('content_block_stop', { type: 'content_block_stop', index: 0 });
  out += sse('content_block_start', {
    type: 'content_block_start',
    index: 1,
    content_block: { type: 'tool_use', id: TOOL_USE_ID, name: MOCK_TOOL_CALL.name, input: {} },
  });
  for (const piece of [args.slice(0, third), args.slice(third, 2 * third), args.slice(2 * third)]) {
    out += sse('content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: piece } });
  }
  out += sse('content_block_stop', { type: 'content_block_stop', index: 1 });
  out += sse('message_delta', {
    type: 'message_delta',
    delta: { stop_reason: 'tool_use', stop_sequence: null },
    usage: { output_tokens: MOCK_TOOL_COMPLETION_TOKENS },
  });
  res.end(out + sse('message_stop', { type: 'message_stop' }));
}
