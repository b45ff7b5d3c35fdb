import type http from 'node:http';
import { countTokens, promptTokens } from '../../workers/adapters/sim/tokens.ts';
import { MOCK_TOOL_CALL, MOCK_TOOL_COMPLETION_TOKENS, mockToken } from './server.ts';

// Anthropic's Messages API, as the mock vendor speaks it: POST /v1/messages with x-api-key and
// anthropic-version, SSE events message_start / content_block_start / ping / content_block_delta
// (text_delta) / content_block_stop / message_delta (stop_reason, cumulative output usage) /
// message_stop, and Anthropic's error bodies. Output is the same word sequence as the OpenAI mock.
//   mock-claude → normal answer (16 tokens, cut at max_tokens → stop_reason max_tokens)
//   mock-claude-overloaded → HTTP 529 overloaded_error
//   mock-claude-midstream-error → 3 text deltas, then an `event: error` overloaded_error
//   mock-claude-tools → a text block "Checking." then a tool_use block (MOCK_TOOL_CALL's name and
//     input, streamed as input_json_delta pieces), stop_reason tool_use

const err = (type: string, message: string) => JSON.stringify({ type: 'error', error: { type, message } });
const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

let seq = 0;

export function handleAnthropic(req: http.IncomingMessage, res: http.ServerResponse, raw: string, outputTokens: number): void {
  const send = (status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  if (!req.headers['x-api-key']) return send(401, err('authentication_error', 'x-api-key header is required'));
  if (!req.headers['anthropic-version']) return send(400, err('invalid_request_error', 'anthropic-version header is required'));
  let body: { model?: string; max_tokens?: number; messages?: Array<{ content: string }>; system?: string; stream?: boolean };
  try {
    body = JSON.parse(raw);
  } catch {
    return send(400, err('invalid_request_error', 'invalid JSON'));
  }
  if (typeof body.max_tokens !== 'number') return send(400, err('invalid_request_error', 'max_tokens: Field required'));
  if (body.model === 'mock-claude-overloaded') return send(529, err('overloaded_error', 'Overloaded'));
  if (body.model === 'mock-claude-tools') return toolUse(res, body, send);
  const natural = body.model === 'mock-claude-midstream-error' ? 1000 : outputTokens;
  const n = Math.min(natural, body.max_tokens);
  const stop = n < natural ? 'max_tokens' : 'end_turn';
  const input = promptTokens(body.messages ?? []) + (body.system ? countTokens(body.system) : 0);
  const id = `msg_mock${(++seq).toString(36).padStart(8, '0')}`;
  let text = '';
  for (let i = 0; i < n; i++) text += mockToken(i);
  if (body.stream !== true) {
    return send(
      200,
      JSON.stringify({
        id,
        type: 'message',
        role: 'assistant',
        model: body.model,
        content: [{ type: 'text', text }],
        stop_reason: stop,
        stop_sequence: null,
        usage: { input_tokens: input, output_tokens: n },
      }),
    );
  }
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
      usage: { input_tokens: input, output_tokens: 1 },
    },
  });
  out += sse('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
  out += sse('ping', { type: 'ping' });
  if (body.model === 'mock-claude-midstream-error') {
    for (let i = 0; i < 3; i++) out += sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: mockToken(i) } });
    res.end(out + sse('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }));
    return;
  }
  for (let i = 0; i < n; i++) out += sse('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: mockToken(i) } });
  out += sse('content_block_stop', { type: 'content_block_stop', index: 0 });
  out += sse('message_delta', { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: n } });
  out += sse('message_stop', { type: 'message_stop' });
  res.end(out);
}

const TOOL_USE_ID = 'toolu_mock_weather_1';

function toolUse(
  res: http.ServerResponse,
  body: { model?: string; messages?: Array<{ content: unknown }>; stream?: boolean },
  send: (status: number, body: string) => void,
): void {
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
