import { describe, expect, it } from 'vitest';
import { messageResultOf, messageUsage } from './batch.ts';

// Mapping Anthropic's Message Batches results back, request by request (docs/batch.md "vendor mode").
describe('Anthropic message batch results', () => {
  it('maps each result type: succeeded a 200 with its message, errored its error status, canceled and expired not run', () => {
    const message = { id: 'msg_1', type: 'message', usage: { input_tokens: 10, output_tokens: 3 } };
    expect(messageResultOf({ custom_id: 'l0', result: { type: 'succeeded', message } })).toEqual({
      custom_id: 'l0',
      status_code: 200,
      body: message,
      error: null,
    });
    const error = { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } };
    expect(messageResultOf({ custom_id: 'l1', result: { type: 'errored', error } })).toEqual({ custom_id: 'l1', status_code: 529, body: error, error: null });
    expect(
      messageResultOf({ custom_id: 'l2', result: { type: 'errored', error: { type: 'error', error: { type: 'invalid_request_error' } } } })?.status_code,
    ).toBe(400);
    expect(messageResultOf({ custom_id: 'l3', result: { type: 'canceled' } })?.error?.code).toBe('batch_cancelled');
    expect(messageResultOf({ custom_id: 'l4', result: { type: 'expired' } })?.error?.code).toBe('batch_expired');
    expect(messageResultOf({ custom_id: 'l5', result: { type: 'unknown' } })).toBeNull();
    expect(messageResultOf({ result: { type: 'succeeded' } })).toBeNull();
  });

  it("takes a message's usage: cache reads and writes are part of the prompt", () => {
    expect(messageUsage({ usage: { input_tokens: 10, output_tokens: 3 } })).toEqual({ prompt_tokens: 10, completion_tokens: 3 });
    expect(messageUsage({ usage: { input_tokens: 10, cache_read_input_tokens: 100, cache_creation_input_tokens: 20, output_tokens: 5 } })).toEqual({
      prompt_tokens: 130,
      cached_tokens: 100,
      cache_write_tokens: 20,
      completion_tokens: 5,
    });
    expect(messageUsage({ id: 'x' })).toBeNull();
  });
});
