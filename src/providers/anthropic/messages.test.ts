import { describe, expect, it } from 'vitest';
import { makeCall } from '../../../test/helpers/worker.ts';
import type { AdapterEvent } from '../types.ts';
import { callUrl, requestHeaders } from './api.ts';
import { buildCountTokensBody, buildMessagesBody } from './messages.ts';
import { completionEvents, createStreamDecoder, inputCounts } from './response.ts';

const anthropic = { id: 'anthropic/x', upstream_model: 'claude-x', protocol: 'anthropic' as const, base_url: 'https://api.anthropic.com/v1' };

describe('native Messages jobs', () => {
  it('sends the allowlisted fields, the capped max_tokens, stream: true, and the betas as a header, never in the body', () => {
    const call = makeCall('anthropic', {
      api: 'messages',
      upstream: anthropic,
      max_tokens: 8192,
      body: {
        messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] }],
        system: [{ type: 'text', text: 'S', cache_control: { type: 'ephemeral' }, extra: 1 }],
        max_tokens: 32000,
        metadata: { user_id: 'u1', other: 'x' },
        thinking: { type: 'enabled', budget_tokens: 10000 },
        context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
        output_config: { effort: 'high', unknown: 1 },
        speed: 'fast',
        anthropic_beta: ['context-management-2025-06-27', 'effort-2025-11-24'],
      },
    });
    expect(buildMessagesBody(call)).toEqual({
      model: 'claude-x',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral' } }] }],
      system: [{ type: 'text', text: 'S', cache_control: { type: 'ephemeral' } }],
      metadata: { user_id: 'u1' },
      // 10 000 no longer fits under the capped max_tokens: lowered below it, as Anthropic requires
      thinking: { type: 'enabled', budget_tokens: 8191 },
      context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
      output_config: { effort: 'high' },
      max_tokens: 8192,
      stream: true,
    });
    const headers = requestHeaders('sk-ant', 10, call);
    expect(headers).toMatchObject({ 'anthropic-beta': 'context-management-2025-06-27,effort-2025-11-24', 'x-api-key': 'sk-ant', accept: 'text/event-stream' });
    expect(callUrl(anthropic.base_url, call).href).toBe('https://api.anthropic.com/v1/messages');
  });

  it('a token count goes to /messages/count_tokens without max_tokens or stream, and answers {input_tokens} as a body', () => {
    const call = makeCall('anthropic', {
      api: 'count_tokens',
      upstream: anthropic,
      body: { messages: [{ role: 'user', content: 'hi' }], tools: [{ name: 'f', input_schema: { type: 'object' } }], stop_sequences: ['x'] },
    });
    expect(buildCountTokensBody(call)).toEqual({
      model: 'claude-x',
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ name: 'f', input_schema: { type: 'object' } }],
    });
    expect(callUrl(anthropic.base_url, call).href).toBe('https://api.anthropic.com/v1/messages/count_tokens');
    expect(requestHeaders(null, 1, call).accept).toBe('application/json');
    const out: AdapterEvent[] = [];
    completionEvents({ input_tokens: 42 }, out, null, call);
    expect(out).toEqual([
      { type: 'body', json: '{"input_tokens":42}' },
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: 42, completion_tokens: 0 },
    ]);
  });
});

describe('Anthropic stream decoder: thinking, signatures, stop sequences, cache usage', () => {
  it('streams thinking and its signature, redacted thinking, and the stop sequence', () => {
    const d = createStreamDecoder(null);
    const out: AdapterEvent[] = [];
    const ev = (x: unknown) => d.data(JSON.stringify(x), out);
    ev({
      type: 'message_start',
      message: {
        usage: {
          input_tokens: 10,
          cache_read_input_tokens: 100,
          cache_creation_input_tokens: 50,
          cache_creation: { ephemeral_5m_input_tokens: 20, ephemeral_1h_input_tokens: 30 },
          output_tokens: 1,
        },
      },
    });
    ev({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } });
    ev({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'hmm' } });
    ev({ type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'SIG==' } });
    ev({ type: 'content_block_start', index: 1, content_block: { type: 'redacted_thinking', data: 'ENC' } });
    ev({ type: 'content_block_start', index: 2, content_block: { type: 'text', text: '' } });
    ev({ type: 'content_block_delta', index: 2, delta: { type: 'text_delta', text: 'ok' } });
    ev({ type: 'message_delta', delta: { stop_reason: 'stop_sequence', stop_sequence: 'END' }, usage: { output_tokens: 7 } });
    ev({ type: 'message_stop' });
    const input = { prompt_tokens: 160, cached_tokens: 100, cache_write_tokens: 20, cache_write_1h_tokens: 30 };
    expect(out).toEqual([
      { type: 'prompt_usage', ...input },
      { type: 'reasoning', content: 'hmm' },
      { type: 'reasoning_signature', signature: 'SIG==' },
      { type: 'redacted_reasoning', data: 'ENC' },
      { type: 'delta', content: 'ok' },
      { type: 'finish', reason: 'stop', stop_sequence: 'END' },
      { type: 'usage', ...input, completion_tokens: 7 },
    ]);
  });

  it('cache writes without a lifetime split are 5-minute writes; message_delta may restate the input counts', () => {
    expect(inputCounts({ input_tokens: 3, cache_creation_input_tokens: 40 })).toEqual({ prompt_tokens: 43, cache_write_tokens: 40 });
    const d = createStreamDecoder(null);
    const out: AdapterEvent[] = [];
    const ev = (x: unknown) => d.data(JSON.stringify(x), out);
    ev({ type: 'message_start', message: { usage: { input_tokens: 0, output_tokens: 1 } } });
    ev({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { input_tokens: 9, cache_read_input_tokens: 1, output_tokens: 2 } });
    ev({ type: 'message_stop' });
    expect(out.at(-1)).toEqual({ type: 'usage', prompt_tokens: 10, cached_tokens: 1, completion_tokens: 2 });
  });

  it('a whole Message keeps its blocks in order, thinking with its signature', () => {
    const out: AdapterEvent[] = [];
    completionEvents(
      {
        content: [
          { type: 'thinking', thinking: 't', signature: 'S' },
          { type: 'text', text: 'a' },
          { type: 'tool_use', id: 'toolu_1', name: 'f', input: { x: 1 } },
        ],
        stop_reason: 'tool_use',
        usage: { input_tokens: 5, cache_read_input_tokens: 2, output_tokens: 3 },
      },
      out,
      null,
    );
    expect(out).toEqual([
      { type: 'reasoning', content: 't' },
      { type: 'reasoning_signature', signature: 'S' },
      { type: 'delta', content: 'a' },
      { type: 'tool_calls', tool_calls: [{ index: 0, id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }] },
      { type: 'finish', reason: 'tool_calls' },
      { type: 'usage', prompt_tokens: 7, cached_tokens: 2, completion_tokens: 3 },
    ]);
  });
});
