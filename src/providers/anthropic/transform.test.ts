import { describe, expect, it } from 'vitest';
import type { AdapterEvent } from '../types.ts';
import { buildAnthropicBody } from './request.ts';
import { createStreamDecoder } from './response.ts';
import { makeCall } from '../../../test/helpers/worker.ts';

describe('anthropic request transform', () => {
  it('moves system/developer text to `system`, maps the parameters Anthropic has, drops the rest', () => {
    const call = makeCall('anthropic', {
      upstream: { id: 'anthropic/x', upstream_model: 'claude-x', protocol: 'anthropic' },
      max_tokens: 77,
      body: {
        messages: [
          { role: 'system', content: 'A' },
          { role: 'developer', content: [{ type: 'text', text: 'B' }] },
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'hello' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'x' },
              { type: 'text', text: 'y' },
            ],
          },
        ],
        temperature: 1.7,
        top_p: 0.9,
        top_k: 5,
        stop: 'END',
        user: 'u1',
        seed: 5,
        logit_bias: {},
      },
    });
    expect(buildAnthropicBody(call)).toEqual({
      model: 'claude-x',
      max_tokens: 77,
      stream: true,
      system: 'A\n\nB',
      temperature: 1,
      top_p: 0.9,
      top_k: 5,
      stop_sequences: ['END'],
      metadata: { user_id: 'u1' },
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: 'x\ny' },
      ],
    });
  });

  it('refuses what it cannot translate, with 400s', () => {
    const bad = (body: Record<string, unknown>) => () =>
      buildAnthropicBody(makeCall('anthropic', { upstream: { id: 'anthropic/x', protocol: 'anthropic' }, body }));
    expect(bad({ messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'retrieval' }] })).toThrow('only function tools are supported');
    expect(bad({ messages: [{ role: 'function', content: 'x' }] })).toThrow('role "function" is not supported');
    expect(bad({ messages: [{ role: 'assistant', tool_calls: [{ id: 'a', function: { name: 'f', arguments: '{oops' } }] }] })).toThrow('is not valid JSON');
    expect(bad({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: {} }] }] })).toThrow('only text and image content parts');
  });

  it('keeps cache_control on content parts and turns image parts into image blocks', () => {
    const call = makeCall('anthropic', {
      upstream: { id: 'anthropic/x', upstream_model: 'claude-x', protocol: 'anthropic' },
      max_tokens: 10,
      body: {
        messages: [
          { role: 'system', content: [{ type: 'text', text: 'long rules', cache_control: { type: 'ephemeral' } }] },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look', cache_control: { type: 'ephemeral', ttl: '1h' } },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
            ],
          },
        ],
      },
    });
    expect(buildAnthropicBody(call)).toMatchObject({
      system: [{ type: 'text', text: 'long rules', cache_control: { type: 'ephemeral' } }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look', cache_control: { type: 'ephemeral', ttl: '1h' } },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
          ],
        },
      ],
    });
  });

  it("makes other vendors' tool-call ids valid for Anthropic, the same on the call and its result", () => {
    const call = makeCall('anthropic', {
      upstream: { id: 'anthropic/x', protocol: 'anthropic' },
      body: {
        messages: [
          { role: 'user', content: 'go' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'functions.get:0', type: 'function', function: { name: 'get', arguments: '{}' } }] },
          { role: 'tool', tool_call_id: 'functions.get:0', content: 'ok' },
        ],
      },
    });
    const messages = buildAnthropicBody(call).messages as Array<{ content: Array<{ id?: string; tool_use_id?: string }> }>;
    const id = messages[1].content[0].id!;
    expect(id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(id.startsWith('functions_get_0_')).toBe(true);
    expect(messages[2].content[0].tool_use_id).toBe(id);
  });
});

describe('anthropic stream decoder', () => {
  it('turns Anthropic events into deltas, finish and usage (cache reads counted as input, and apart)', () => {
    const d = createStreamDecoder(null);
    const out: AdapterEvent[] = [];
    const ev = (x: unknown) => d.data(JSON.stringify(x), out);
    ev({ type: 'message_start', message: { usage: { input_tokens: 10, cache_read_input_tokens: 5, output_tokens: 1 } } });
    ev({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    ev({ type: 'ping' });
    ev({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Olá' } });
    ev({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' mundo' } });
    ev({ type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 2 } });
    expect(ev({ type: 'message_stop' })).toBe('done');
    expect(out).toEqual([
      { type: 'prompt_usage', prompt_tokens: 15, cached_tokens: 5 },
      { type: 'delta', content: 'Olá' },
      { type: 'delta', content: ' mundo' },
      { type: 'finish', reason: 'length' },
      { type: 'usage', prompt_tokens: 15, cached_tokens: 5, completion_tokens: 2 },
    ]);
    expect(() => ev({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })).toThrow('overloaded');
  });
});

describe('anthropic tool_use', () => {
  it('numbers tool calls by tool, not by content block, and streams their JSON input as arguments', () => {
    const d = createStreamDecoder(null);
    const out: AdapterEvent[] = [];
    const ev = (x: unknown) => d.data(JSON.stringify(x), out);
    ev({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    ev({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'tu_1', name: 'f', input: {} } });
    ev({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"a":' } });
    ev({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '1}' } });
    ev({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } });
    expect(out).toEqual([
      { type: 'tool_calls', tool_calls: [{ index: 0, id: 'tu_1', type: 'function', function: { name: 'f', arguments: '' } }] },
      { type: 'tool_calls', tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] },
      { type: 'tool_calls', tool_calls: [{ index: 0, function: { arguments: '1}' } }] },
      { type: 'finish', reason: 'tool_calls' },
    ]);
  });
});
