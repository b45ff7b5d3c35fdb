import { describe, expect, it } from 'vitest';
import { MOCK_CLAUDE_IMAGE_TOKENS, mockClaudePromptTokens } from '../../../bench/mock-upstream/anthropic.ts';
import { encodeFrame } from '../../bus/frames.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';
import { type CatracaError, errors } from '../../errors.ts';
import { Collected } from '../collector.ts';
import { anthropicInputBound } from './bound.ts';
import { MessagesEncoder } from './encoder.ts';
import { countTokens, messages } from './index.ts';
import { cacheBreakpoints, checkVersion, forwardedBetas, vendorMessages } from './policy.ts';
import type { AnthropicBody } from './schema.ts';
import { toChat } from './to-chat.ts';
import { validToolId } from './tool-ids.ts';

const model = (over: Partial<CatalogEntry> = {}) =>
  ({
    id: 'v/m',
    protocol: 'openai',
    extra_params: [],
    reasoning: false,
    input_modalities: ['text'],
    context_length: 200_000,
    image_input_tokens: null,
    max_output_tokens: 8192,
    ...over,
  }) as CatalogEntry;

const parseError = (json: Record<string, unknown>) => {
  try {
    messages.parse(json);
  } catch (err) {
    return { status: (err as CatracaError).status, message: (err as CatracaError).message };
  }
  return null;
};

describe('reading a Messages request', () => {
  it("refuses a bad body in Anthropic's wording", () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    expect(parseError(base)).toEqual({ status: 400, message: 'max_tokens: Field required' });
    expect(parseError({ ...base, max_tokens: 0 })).toEqual({ status: 400, message: 'max_tokens: Input should be greater than or equal to 1' });
    expect(parseError({ ...base, max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 2000 } })).toEqual({
      status: 400,
      message: 'max_tokens: `max_tokens` must be greater than `thinking.budget_tokens`',
    });
    expect(parseError({ ...base, max_tokens: 10, messages: [{ role: 'user' }] })).toEqual({ status: 400, message: 'messages.0.content: Field required' });
    expect(parseError({ ...base, max_tokens: 10, temperature: 1.5 })?.message).toMatch(/^temperature: /);
    expect(countTokens.parse({ ...base }).stream).toBe(false); // a count needs no max_tokens
  });

  it('takes anthropic-version from 2023-06-01 on, and only the betas priced as tokens', () => {
    for (const ok of ['', '2023-06-01', '2025-10-01', '2031-01-01']) expect(checkVersion(ok)).toBeNull();
    for (const bad of ['2023-01-01', '2023-5-1', 'latest', '2023-02-30x']) expect(checkVersion(bad)?.status).toBe(400);
    expect(forwardedBetas('claude-code-20250219, context-1m-2025-08-07,effort-2025-11-24,files-api-2025-04-14,effort-2025-11-24')).toEqual([
      'claude-code-20250219',
      'effort-2025-11-24',
    ]);
  });
});

describe('what an Anthropic vendor is sent', () => {
  it('drops unsigned thinking (and a turn left empty by it), keeps signed thinking as it came, makes tool ids valid', () => {
    const out = vendorMessages([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: 'from gpt', signature: '' }] },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 't', signature: 'SIG', extra: 1 },
          { type: 'tool_use', id: 'fn.get:1', name: 'get', input: {}, cache_control: { type: 'ephemeral' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'fn.get:1', content: 'r', is_error: false, foo: 2 }] },
    ]);
    const id = validToolId('fn.get:1');
    expect(id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(id).not.toBe(validToolId('fn_get_1'));
    expect(out).toEqual([
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 't', signature: 'SIG' },
          { type: 'tool_use', id, name: 'get', input: {}, cache_control: { type: 'ephemeral' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'r', is_error: false }] },
    ]);
  });

  it('refuses server tools, containers and images a model does not take, naming the field', () => {
    const req = (extra: Record<string, unknown>) => messages.parse({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra });
    const claude = model({ protocol: 'anthropic' });
    expect(messages.check(req({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), claude)?.param).toBe('tools.0.type');
    expect(messages.check(req({ tools: [{ type: 'bash_20250124', name: 'bash' }] }), claude)).toBeNull();
    expect(messages.check(req({ container: 'c1' }), claude)?.param).toBe('container');
    expect(messages.check(req({ service_tier: 'priority' }), claude)?.param).toBe('service_tier');
    expect(messages.check(req({ context_management: { edits: [{ type: 'compact_20260112' }] } }), claude)?.param).toBe('context_management.edits.0.type');
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } };
    const withImage = req({ messages: [{ role: 'user', content: [image] }] });
    expect(messages.check(withImage, claude)).toMatchObject({
      param: 'messages.0.content.0',
      message: 'messages.0.content.0: This model does not accept image input.',
    });
    expect(messages.check(withImage, model({ protocol: 'anthropic', input_modalities: ['text', 'image'] }))).toBeNull();
    // translated for OpenAI: an Anthropic-defined tool has no chat form
    expect(messages.check(req({ tools: [{ type: 'bash_20250124', name: 'bash' }] }), model())?.param).toBe('tools.0.type');
    expect(messages.check(req({ unknown_field: 1, speed: 'fast' }), claude)).toBeNull(); // dropped, never forwarded
    const job = messages.job(req({ unknown_field: 1, speed: 'fast', metadata: { user_id: 'u' } }), claude);
    expect(job).toEqual({ api: 'messages', body: { messages: [{ role: 'user', content: 'hi' }], metadata: { user_id: 'u' } } });
  });

  it('a top-level cache_control reaches an Anthropic vendor and its count, never a translated model; more than 4 breakpoints are a 400', () => {
    const req = (extra: Record<string, unknown>) => messages.parse({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra });
    const claude = model({ protocol: 'anthropic' });
    const auto = req({ cache_control: { type: 'ephemeral', ttl: '1h', extra: 1 } });
    expect(messages.job(auto, claude)).toEqual({
      api: 'messages',
      body: { messages: [{ role: 'user', content: 'hi' }], cache_control: { type: 'ephemeral', ttl: '1h' } },
    });
    const count = countTokens.parse({ model: 'm', messages: [{ role: 'user', content: 'hi' }], cache_control: { type: 'ephemeral' } });
    expect(countTokens.job(count, claude)).toEqual({
      api: 'count_tokens',
      body: { messages: [{ role: 'user', content: 'hi' }], cache_control: { type: 'ephemeral' } },
    });
    const chat = messages.job(auto, model()) as { api: string; body: Record<string, unknown> };
    expect(chat.api).toBe('chat');
    expect(JSON.stringify(chat.body)).not.toContain('cache_control');
    expect(parseError({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], cache_control: { type: 'forever' } })).toMatchObject({
      status: 400,
    });

    const cc = { type: 'ephemeral' };
    const text = (t: string) => ({ type: 'text', text: t, cache_control: cc });
    // 1 system + 1 tool + 1 text + 1 in a tool_result = 4: accepted; the top-level one makes 5
    const four = {
      system: [text('s')],
      tools: [{ name: 'f', input_schema: { type: 'object' }, cache_control: cc }],
      messages: [
        { role: 'user', content: [text('q')] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [text('r')] }] },
      ],
    };
    expect(cacheBreakpoints(req(four).anthropic)).toBe(4);
    expect(messages.check(req(four), claude)).toBeNull();
    const refusal = {
      param: 'cache_control',
      code: 'unsupported_parameter',
      message: 'cache_control: A maximum of 4 blocks with cache_control may be provided (a top-level cache_control counts as one). Found 5.',
    };
    expect(messages.check(req({ ...four, cache_control: cc }), claude)).toEqual(refusal);
    expect(messages.check(req({ ...four, cache_control: cc }), model())).toEqual(refusal);
    // a marker on a field never forwarded (thinking) is not a breakpoint
    const thinking = { type: 'thinking', thinking: 't', signature: 'S', cache_control: cc };
    expect(cacheBreakpoints(req({ ...four, messages: [...four.messages, { role: 'assistant', content: [thinking] }] }).anthropic)).toBe(4);
  });
});

describe('Messages → chat completions', () => {
  const body: AnthropicBody = {
    system: [
      { type: 'text', text: 'A', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'B' },
    ],
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } },
        ],
      },
      { role: 'system', content: [{ type: 'text', text: 'mid' }] },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'x', signature: 'S' },
          { type: 'text', text: 'calling' },
          { type: 'tool_use', id: 'toolu_1', name: 'get', input: { a: 1 } },
          { type: 'tool_use', id: 'toolu_2', name: 'get', input: { a: 2 } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: 'one' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'two' }], is_error: true },
          { type: 'text', text: 'thanks' },
        ],
      },
    ],
    tools: [
      { name: 'get', description: 'd', input_schema: { type: 'object' } },
      { name: 'later', input_schema: { type: 'object' }, defer_loading: true },
    ],
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
    stop_sequences: ['END'],
    temperature: 0.5,
    top_k: 3,
    metadata: { user_id: 'u-9' },
    thinking: { type: 'enabled', budget_tokens: 5000 },
  };

  it('translates every field, tool results as tool messages in order before the rest of the turn', () => {
    expect(toChat(body, model(), { maxTokens: 100, stream: true })).toEqual({
      stream: true,
      max_tokens: 100,
      messages: [
        { role: 'system', content: 'A\n\nB' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AA==' } },
          ],
        },
        { role: 'system', content: 'mid' },
        {
          role: 'assistant',
          content: 'calling',
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'get', arguments: '{"a":1}' } },
            { id: 'toolu_2', type: 'function', function: { name: 'get', arguments: '{"a":2}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'one' },
        { role: 'tool', tool_call_id: 'toolu_2', content: 'Error: two' },
        { role: 'user', content: 'thanks' },
      ],
      tools: [{ type: 'function', function: { name: 'get', description: 'd', parameters: { type: 'object' } } }],
      tool_choice: 'required',
      parallel_tool_calls: false,
      stop: ['END'],
      temperature: 0.5,
      user: 'u-9',
    });
  });

  it('sends reasoning_effort only to a model the catalog marks as reasoning, with max_completion_tokens', () => {
    const reasoning = model({ reasoning: true });
    expect(toChat(body, reasoning, { maxTokens: 100, stream: false })).toMatchObject({ reasoning_effort: 'medium', max_completion_tokens: 100 });
    expect(toChat({ ...body, output_config: { effort: 'max' } }, reasoning, { stream: false }).reasoning_effort).toBe('high');
    expect(toChat({ ...body, thinking: { type: 'disabled' } }, reasoning, { stream: false })).not.toHaveProperty('reasoning_effort');
  });

  it('refuses a tool_use left without its tool_result, as Anthropic does', () => {
    const req = messages.parse({
      model: 'm',
      max_tokens: 10,
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
        { role: 'user', content: 'no result' },
      ],
    });
    expect(messages.check(req, model())).toMatchObject({
      param: 'messages.2',
      message: expect.stringContaining('`tool_use` ids were found without `tool_result`'),
    });
  });
});

describe('the hold bound of a Messages request', () => {
  const tools = Array.from({ length: 12 }, (_, i) => ({
    name: `Tool${i}`,
    description: 'Does a thing. '.repeat(40),
    input_schema: { type: 'object', properties: { path: { type: 'string', description: 'where' } }, required: ['path'] },
  }));
  const agent = {
    system: [
      { type: 'text', text: 'billing header' },
      { type: 'text', text: 'You are an agent.', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'Rules. '.repeat(500), cache_control: { type: 'ephemeral' } },
    ],
    tools,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'reminder '.repeat(50) },
          { type: 'text', text: 'say hi' },
        ],
      },
      { role: 'system', content: [{ type: 'text', text: 'env '.repeat(300), cache_control: { type: 'ephemeral' } }] },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: '', signature: 'x'.repeat(400) },
          { type: 'tool_use', id: 'toolu_1', name: 'Tool1', input: { path: '/etc' } },
        ],
      },
      {
        role: 'user',
        content: [
          {
            type: 'tool_result',
            tool_use_id: 'toolu_1',
            content: [
              { type: 'text', text: 'out '.repeat(100) },
              { type: 'image', source: {} },
            ],
          },
        ],
      },
    ],
    thinking: { type: 'adaptive' },
    output_config: { effort: 'high' },
  } as unknown as AnthropicBody;

  it("is the documented byte bound, never below what the vendor bills, and counts images at the catalog's bound", () => {
    const m = model({ image_input_tokens: MOCK_CLAUDE_IMAGE_TOKENS });
    const bound = anthropicInputBound(agent, m);
    // the rule of bound.ts, summed by hand: a string is its UTF-8 bytes + 2 (its JSON quotes), any
    // other value its JSON bytes; 8 per request, per message and per block; tools 1 024 once, 16 each
    const str = (s: string) => Buffer.byteLength(s, 'utf8') + 2;
    const json = (v: unknown) => Buffer.byteLength(JSON.stringify(v), 'utf8');
    const system = 8 + str('billing header') + 8 + str('You are an agent.') + 8 + str('Rules. '.repeat(500));
    const m0 = 8 + (8 + str('reminder '.repeat(50))) + (8 + str('say hi'));
    const m1 = 8 + (8 + str('env '.repeat(300)));
    const m2 = 8 + (8 + str('') + str('x'.repeat(400))) + (8 + str('toolu_1') + str('Tool1') + json({ path: '/etc' }));
    const m3 = 8 + (8 + str('toolu_1') + (8 + str('out '.repeat(100))) + (8 + MOCK_CLAUDE_IMAGE_TOKENS));
    const fields = json({ type: 'adaptive' }) + json({ effort: 'high' });
    const toolBytes = json(tools) + 1024 + 16 * 12;
    expect(bound).toBe(8 + system + m0 + m1 + m2 + m3 + fields + toolBytes);
    expect(bound).toBe(17_536);
    expect(bound).toBeGreaterThanOrEqual(mockClaudePromptTokens(agent));
    // an image without a per-image bound can cost the whole context
    expect(anthropicInputBound(agent, model())).toBe(200_000);
    expect(anthropicInputBound(agent, model({ context_length: 1000, image_input_tokens: 10 }))).toBe(1000);
  });

  it('a model whose context length was never given: no cap at the default context; an unbounded image or document at least its bytes', () => {
    const unset = model({ context_length: 128_000, context_length_set: false } as Partial<CatalogEntry>);
    const long = { messages: [{ role: 'user', content: 'x '.repeat(500_000) }] } as unknown as AnthropicBody;
    // 8 per request, 8 per message, the string's 1 000 000 bytes + 2
    expect(anthropicInputBound(long, unset)).toBe(8 + 8 + 1_000_002);
    expect(anthropicInputBound(long, model({ context_length: 128_000 }))).toBe(128_000);
    const pdf = { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'A'.repeat(900_000) } };
    const image = { type: 'image', source: { type: 'url', url: 'https://x/y.png' } };
    const both = { messages: [{ role: 'user', content: [pdf, image] }] } as unknown as AnthropicBody;
    // the document at its JSON bytes (above 128 000), the image by URL at the default context
    expect(JSON.stringify(pdf).length).toBe(900_087);
    expect(anthropicInputBound(both, unset)).toBe(8 + 8 + 900_087 + 8 + 128_000);
    expect(anthropicInputBound(both, model({ context_length: 128_000 }))).toBe(128_000);
  });
});

/** The SSE events of an encoder's output, parsed. */
function events(sse: string): Array<{ event: string; data: Record<string, unknown> }> {
  return sse
    .split('\n\n')
    .filter(Boolean)
    .map((e) => {
      const [ev, data] = e.split('\n');
      return { event: ev.slice(7), data: JSON.parse(data.slice(6)) };
    });
}

const literal = (s: string) => new TextEncoder().encode(JSON.stringify(s));
const ctx = { requestId: 'gen-1', model: 'anthropic/claude', created: 1, streaming: true };

describe('the Messages stream', () => {
  it('opens a block only when its content arrives, ends thinking with its signature, streams tool input as input_json_delta', () => {
    const enc = new MessagesEncoder(ctx);
    const text = (s: string) => Buffer.from(enc.text(literal(s))).toString();
    let sse = enc.open();
    sse += enc.delta({ reasoning: 'Let' });
    sse += enc.delta({ reasoning: ' me' });
    sse += enc.delta({ reasoning_signature: 'SIG' });
    sse += text('Hello');
    sse += text(' world');
    sse += enc.delta({ tool_calls: [{ index: 0, id: 'call.1', type: 'function', function: { name: 'get', arguments: '{"a"' } }] });
    sse += enc.delta({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] });
    sse += enc.delta({ tool_calls: [{ index: 1, id: 'call_2', function: { name: 'put', arguments: '' } }] });
    sse += enc.keepalive();
    sse += enc.close({
      finishReason: 'tool_calls',
      usage: { prompt_tokens: 100, completion_tokens: 9, cached_tokens: 60, cache_write_tokens: 10 },
      estimated: false,
      costMicros: 1n,
    });
    const got = events(sse).map((e) => [e.event, e.data]);
    const delta = (index: number, d: unknown) => ['content_block_delta', { type: 'content_block_delta', index, delta: d }];
    const start = (index: number, b: unknown) => ['content_block_start', { type: 'content_block_start', index, content_block: b }];
    const stop = (index: number) => ['content_block_stop', { type: 'content_block_stop', index }];
    expect(got.slice(1)).toEqual([
      start(0, { type: 'thinking', thinking: '', signature: '' }),
      delta(0, { type: 'thinking_delta', thinking: 'Let' }),
      delta(0, { type: 'thinking_delta', thinking: ' me' }),
      delta(0, { type: 'signature_delta', signature: 'SIG' }),
      stop(0),
      start(1, { type: 'text', text: '' }),
      delta(1, { type: 'text_delta', text: 'Hello' }),
      delta(1, { type: 'text_delta', text: ' world' }),
      stop(1),
      start(2, { type: 'tool_use', id: validToolId('call.1'), name: 'get', input: {} }),
      delta(2, { type: 'input_json_delta', partial_json: '{"a"' }),
      delta(2, { type: 'input_json_delta', partial_json: ':1}' }),
      start(3, { type: 'tool_use', id: 'call_2', name: 'put', input: {} }),
      ['ping', { type: 'ping' }],
      // tool_use blocks close together at the end, in index order
      stop(2),
      stop(3),
      [
        'message_delta',
        {
          type: 'message_delta',
          delta: { stop_reason: 'tool_use', stop_sequence: null },
          usage: {
            input_tokens: 30,
            cache_creation_input_tokens: 10,
            cache_read_input_tokens: 60,
            cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 0 },
            output_tokens: 9,
          },
        },
      ],
      ['message_stop', { type: 'message_stop' }],
    ]);
    expect(got[0]).toEqual([
      'message_start',
      expect.objectContaining({ type: 'message_start', message: expect.objectContaining({ id: 'gen-1', model: 'anthropic/claude', content: [] }) }),
    ]);
  });

  it('interleaved parallel tool calls: every argument piece goes to its own block, still open; all close at the end in index order', () => {
    const enc = new MessagesEncoder(ctx);
    let sse = enc.open();
    sse += Buffer.from(enc.text(literal('Calling.'))).toString();
    sse += enc.delta({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"x":' } }] });
    sse += enc.delta({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'g', arguments: '{"y":2}' } }] });
    sse += enc.delta({ tool_calls: [{ index: 0, function: { arguments: '1}' } }] });
    sse += enc.delta({ tool_calls: [{ index: 2, id: 'call_c', type: 'function', function: { name: 'h', arguments: '{}' } }] });
    sse += enc.delta({ tool_calls: [{ index: 1, function: { arguments: '' } }] });
    sse += enc.close({ finishReason: 'tool_calls', usage: { prompt_tokens: 3, completion_tokens: 4 }, estimated: false, costMicros: 0n });
    const got = events(sse).map((e) => [e.event, e.data]);
    const delta = (index: number, partial_json: string) => [
      'content_block_delta',
      { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } },
    ];
    const start = (index: number, b: unknown) => ['content_block_start', { type: 'content_block_start', index, content_block: b }];
    const stop = (index: number) => ['content_block_stop', { type: 'content_block_stop', index }];
    expect(got.slice(1, -2)).toEqual([
      start(0, { type: 'text', text: '' }),
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Calling.' } }],
      stop(0),
      start(1, { type: 'tool_use', id: 'call_a', name: 'f', input: {} }),
      delta(1, '{"x":'),
      start(2, { type: 'tool_use', id: 'call_b', name: 'g', input: {} }),
      delta(2, '{"y":2}'),
      delta(1, '1}'),
      start(3, { type: 'tool_use', id: 'call_c', name: 'h', input: {} }),
      delta(3, '{}'),
      stop(1),
      stop(2),
      stop(3),
    ]);
    expect(got.at(-2)![0]).toBe('message_delta');
    expect(got.at(-1)).toEqual(['message_stop', { type: 'message_stop' }]);
    // no delta after its block's stop
    const stopped = new Set<number>();
    for (const [name, data] of got as Array<[string, { index: number }]>) {
      if (name === 'content_block_stop') stopped.add(data.index);
      if (name === 'content_block_delta') expect(stopped.has(data.index)).toBe(false);
    }
  });

  it("reports a stop sequence and fails mid-stream with Anthropic's error event", () => {
    const enc = new MessagesEncoder(ctx);
    const end = events(
      enc.close({ finishReason: 'stop', stopSequence: 'END', usage: { prompt_tokens: 1, completion_tokens: 1 }, estimated: false, costMicros: 0n }),
    );
    expect(end[0].data.delta).toEqual({ stop_reason: 'stop_sequence', stop_sequence: 'END' });
    expect(events(enc.fail(errors.upstream(503, 'upstream_overloaded', 'busy')))).toEqual([
      { event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'busy' } } },
    ]);
  });

  it('the whole Message keeps the blocks in order; unparsable tool arguments are kept, not lost', () => {
    const c = new Collected();
    c.delta({ reasoning: 'r' });
    c.delta({ reasoning_signature: 'S' });
    c.delta({ redacted_reasoning: 'ENC' });
    c.text('hi');
    c.toolCalls([{ index: 0, id: 'toolu_1', function: { name: 'f', arguments: '{"x":1}' } }]);
    c.toolCalls([{ index: 1, id: 'toolu_2', function: { name: 'g', arguments: '{"cut' } }]);
    const body = new MessagesEncoder({ ...ctx, streaming: false }).body(c, {
      finishReason: 'length',
      usage: { prompt_tokens: 5, completion_tokens: 2 },
      estimated: false,
      costMicros: 0n,
    });
    expect(body).toMatchObject({
      id: 'gen-1',
      type: 'message',
      role: 'assistant',
      model: 'anthropic/claude',
      stop_reason: 'max_tokens',
      stop_sequence: null,
      content: [
        { type: 'thinking', thinking: 'r', signature: 'S' },
        { type: 'redacted_thinking', data: 'ENC' },
        { type: 'text', text: 'hi' },
        { type: 'tool_use', id: 'toolu_1', name: 'f', input: { x: 1 } },
        { type: 'tool_use', id: 'toolu_2', name: 'g', input: '{"cut' },
      ],
      usage: { input_tokens: 5, output_tokens: 2, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
    });
  });

  it("answers errors in Anthropic's shape and statuses (our 503 is Anthropic's 529)", () => {
    const answer = (e: CatracaError) => messages.errorBody(e) as { status?: number; body: { error: { type: string } } };
    expect(answer(errors.invalidKey())).toEqual({ status: 401, body: { type: 'error', error: { type: 'authentication_error', message: 'Invalid API key.' } } });
    expect(answer(errors.insufficientBalance('no money')).status).toBe(402);
    expect(answer(errors.insufficientBalance('no money')).body.error.type).toBe('billing_error');
    expect(answer(errors.modelNotAllowed('x')).body.error.type).toBe('permission_error');
    expect(answer(errors.modelNotFound('x')).body.error.type).toBe('not_found_error');
    expect(answer(errors.bodyTooLarge(1))).toMatchObject({ status: 413, body: { error: { type: 'request_too_large' } } });
    expect(answer(errors.rateLimited(1))).toMatchObject({ status: 429, body: { error: { type: 'rate_limit_error' } } });
    expect(answer(errors.noWorker('p'))).toMatchObject({ status: 529, body: { error: { type: 'overloaded_error' } } });
    expect(answer(errors.timeout())).toMatchObject({ status: 504, body: { error: { type: 'timeout_error' } } });
    expect(answer(errors.internal())).toMatchObject({ status: 500, body: { error: { type: 'api_error' } } });
    expect(answer(errors.upstream(502, 'upstream_error', 'x'))).toMatchObject({ status: 502, body: { error: { type: 'api_error' } } });
  });
});

// frames stay what the worker sends; the encoder's text path copies their literal bytes
it('a text frame literal goes into the text_delta unchanged', () => {
  const frame = encodeFrame(0, { t: 'text', content: 'é"\n' });
  const lit = new TextEncoder().encode(frame.slice(frame.indexOf('\n') + 1));
  const enc = new MessagesEncoder(ctx);
  const out = events(Buffer.from(enc.text(lit)).toString());
  expect(out[1].data).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'é"\n' } });
});
