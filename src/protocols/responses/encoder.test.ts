import { describe, expect, it } from 'vitest';
import { errors } from '../../errors.ts';
import { Collected } from '../collector.ts';
import type { Ending } from '../types.ts';
import { ResponsesEncoder } from './encoder.ts';
import { echoOf } from './response.ts';
import { parseRequest, parseTools } from './schema.ts';
import { chatTools } from './tools.ts';

// The Responses wire format as the encoder writes it from frames, without services: every event
// typed and numbered, the items' events in OpenAI's order, the final Response and its usage.

const REQUEST_ID = 'gen-mabc123def456';
const TOOLS = [
  { type: 'function', name: 'get_weather', parameters: { type: 'object' } },
  { type: 'custom', name: 'apply_patch' },
  { type: 'namespace', name: 'crm', description: 'CRM', tools: [{ type: 'function', name: 'lookup', parameters: {} }] },
];

function encoder(streaming: boolean) {
  const r = parseRequest({ model: 'm', input: 'hi', tools: TOOLS });
  const tools = parseTools(r.tools);
  return new ResponsesEncoder(
    { requestId: REQUEST_ID, model: 'mock/gpt', created: 1_700_000_000, streaming },
    echoOf(r, tools),
    chatTools(tools, null).byChatName,
  );
}

const ending = (finishReason = 'stop'): Ending => ({
  finishReason,
  usage: { prompt_tokens: 11, completion_tokens: 7 },
  estimated: false,
  costMicros: 123n,
});

interface Event {
  type: string;
  sequence_number: number;
  [k: string]: unknown;
}

/** The SSE text as events; each `event:` line must name its data's type. */
function events(sse: string): Event[] {
  return sse
    .split('\n\n')
    .filter((block) => block && !block.startsWith(':'))
    .map((block) => {
      const [eventLine, dataLine] = block.split('\n');
      const data = JSON.parse(dataLine.slice('data: '.length)) as Event;
      expect(eventLine).toBe(`event: ${data.type}`);
      return data;
    });
}

const literal = (s: string) => Buffer.from(JSON.stringify(s));

describe('ResponsesEncoder, streamed', () => {
  it('writes text in order with sequence numbers from 0, and response.completed with usage', () => {
    const e = encoder(true);
    let sse = e.open();
    sse += Buffer.from(e.text(literal('Olá'))).toString();
    sse += Buffer.from(e.text(literal(', "mundo"\n'))).toString();
    sse += e.keepalive();
    sse += e.close(ending());
    const ev = events(sse);
    expect(ev.map((x) => x.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(ev.map((x) => x.sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev[4]).toMatchObject({ item_id: 'msg_mabc123def456_0', output_index: 0, content_index: 0, delta: 'Olá' });
    expect(ev[6]).toMatchObject({ text: 'Olá, "mundo"\n' });
    const done = ev[9].response as Record<string, unknown>;
    expect(done).toMatchObject({
      id: 'resp_mabc123def456',
      object: 'response',
      created_at: 1_700_000_000,
      status: 'completed',
      model: 'mock/gpt',
      output: [
        { id: 'msg_mabc123def456_0', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'Olá, "mundo"\n' }] },
      ],
      usage: {
        input_tokens: 11,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 7,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 18,
        cost: 0.000123,
      },
    });
    expect(Number.isInteger(done.created_at)).toBe(true);
    expect((ev[0].response as { status: string }).status).toBe('in_progress');
  });

  it('streams reasoning as a summary, then function, namespaced and custom calls with the client names', () => {
    const e = encoder(true);
    let sse = e.delta({ reasoning: 'Let me' });
    sse += e.delta({ reasoning: ' think' });
    sse += e.delta({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"ci' } }] });
    sse += e.delta({ tool_calls: [{ index: 0, function: { arguments: 'ty":"SP"}' } }] });
    sse += e.delta({ tool_calls: [{ index: 1, id: 'call_2', function: { name: 'crm__lookup', arguments: '{}' } }] });
    sse += e.delta({ tool_calls: [{ index: 2, id: 'call_3', function: { name: 'apply_patch', arguments: '{"input":"*** Begin' } }] });
    sse += e.delta({ tool_calls: [{ index: 2, function: { arguments: ' Patch"}' } }] });
    sse += e.close(ending('tool_calls'));
    const ev = events(sse);
    expect(ev.map((x) => x.sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev.map((x) => x.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.custom_tool_call_input.delta',
      'response.custom_tool_call_input.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const final = ev[ev.length - 1].response as { status: string; output: unknown[] };
    expect(final.status).toBe('completed');
    expect(final.output).toEqual([
      { id: 'rs_mabc123def456_0', type: 'reasoning', summary: [{ type: 'summary_text', text: 'Let me think' }] },
      { id: 'fc_mabc123def456_1', type: 'function_call', status: 'completed', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"SP"}' },
      { id: 'fc_mabc123def456_2', type: 'function_call', status: 'completed', call_id: 'call_2', name: 'lookup', namespace: 'crm', arguments: '{}' },
      { id: 'ctc_mabc123def456_3', type: 'custom_tool_call', status: 'completed', call_id: 'call_3', name: 'apply_patch', input: '*** Begin Patch' },
    ]);
    expect(ev[19]).toMatchObject({ item_id: 'ctc_mabc123def456_3', delta: '*** Begin Patch' });
  });

  it('ends a response cut by the output cap with response.incomplete (max_output_tokens)', () => {
    const e = encoder(true);
    const sse = Buffer.from(e.text(literal('Hello'))).toString() + e.close(ending('length'));
    const last = events(sse).pop()!;
    expect(last.type).toBe('response.incomplete');
    expect(last.response).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      output: [{ type: 'message', status: 'incomplete' }],
    });
  });

  it('fails after the stream opened with an error event and response.failed', () => {
    const e = encoder(true);
    const sse = Buffer.from(e.text(literal('Hel'))).toString() + e.fail(errors.upstream(502, 'upstream_stream_interrupted', 'The vendor stopped.'));
    const ev = events(sse);
    expect(ev.map((x) => x.sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev.slice(-2)).toMatchObject([
      { type: 'error', code: 'upstream_stream_interrupted', message: 'The vendor stopped.' },
      { type: 'response.failed', response: { status: 'failed', error: { code: 'upstream_stream_interrupted', message: 'The vendor stopped.' } } },
    ]);
  });
});

describe('ResponsesEncoder, not streamed', () => {
  it('answers the Response object with the ids the stream would have used', async () => {
    const collected = new Collected();
    collected.delta({ reasoning: 'Hmm' });
    collected.text('Checking.');
    collected.toolCalls([{ index: 0, id: 'call_9', function: { name: 'crm__lookup', arguments: '{"id":1}' } }]);
    const e = encoder(false);
    expect(e.beforeEnd(collected, ending('tool_calls'))).toBeUndefined(); // nothing stored: no onFinal
    const body = e.body(collected, ending('tool_calls'));
    expect(body.output).toEqual([
      { id: 'rs_mabc123def456_0', type: 'reasoning', summary: [{ type: 'summary_text', text: 'Hmm' }] },
      {
        id: 'msg_mabc123def456_1',
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Checking.', annotations: [], logprobs: [] }],
      },
      { id: 'fc_mabc123def456_2', type: 'function_call', status: 'completed', call_id: 'call_9', name: 'lookup', namespace: 'crm', arguments: '{"id":1}' },
    ]);
    expect(body).toMatchObject({
      id: 'resp_mabc123def456',
      status: 'completed',
      tool_choice: 'auto',
      parallel_tool_calls: true,
      store: true,
      previous_response_id: null,
    });
    expect(body.tools).toEqual(TOOLS);
  });
});
