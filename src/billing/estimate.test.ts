import { describe, expect, it } from 'vitest';
import { getEncoding } from 'js-tiktoken';
import { inputTokensUpperBound, TOOLS_OVERHEAD } from './estimate.ts';
import { mockPromptTokens, MOCK_IMAGE_TOKENS } from '../../bench/mock-upstream/server.ts';

const model = { context_length: 128_000, image_input_tokens: 25_600 };
const o200k = getEncoding('o200k_base');
/**
 * An over-count of what an OpenAI-style vendor renders into the prompt: the text of every string
 * as is, every other field as JSON, each image at the mock's (gpt-4o-mini's) price, 4 tokens of
 * framing per message.
 */
function rendered(body: Record<string, unknown>): number {
  let n = 3;
  for (const m of body.messages as Array<Record<string, unknown>>) {
    n += 4;
    for (const [k, v] of Object.entries(m)) {
      if (k === 'content' && Array.isArray(v)) {
        for (const p of v as Array<{ type: string; text?: string }>) n += p.type === 'image_url' ? MOCK_IMAGE_TOKENS : o200k.encode(p.text ?? '').length;
      } else n += typeof v === 'string' ? o200k.encode(v).length : o200k.encode(JSON.stringify(v)).length;
    }
  }
  for (const f of ['tools', 'functions', 'response_format']) if (body[f]) n += o200k.encode(JSON.stringify(body[f])).length;
  return n;
}

const bodies: Array<Record<string, unknown> & { messages: unknown[] }> = [
  { messages: [{ role: 'user', content: 'hi' }] },
  {
    messages: [
      { role: 'system', content: 'Você é um assistente. Responda em português: ação, coração, pão.' },
      { role: 'user', content: '日本語のテキストと絵文字 🎉🎉🎉 mixed with English words.' },
    ],
  },
  { messages: [{ role: 'user', content: '\u0000\u0001'.repeat(40) + '🙂'.repeat(30) }] },
  {
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'describe' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,' + 'A'.repeat(50_000) } },
        ],
      },
    ],
  },
  {
    messages: [
      { role: 'user', content: 'weather?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"São Paulo"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 31, "sky": "clear"}' },
    ],
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ],
  },
  {
    messages: [{ role: 'user', content: 'x' }],
    functions: [{ name: 'f', parameters: { type: 'object', properties: { a: { type: 'integer', enum: [1, 2, 3] } } } }],
  },
  {
    messages: [{ role: 'user', content: 'json please' }],
    response_format: { type: 'json_schema', json_schema: { name: 'r', schema: { type: 'object', properties: { answer: { type: 'string' } } } } },
  },
];

describe('inputTokensUpperBound', () => {
  it.each(bodies.map((b, i) => [i, b]))('body %i: never below what the vendor can bill', (_i, body) => {
    const bound = inputTokensUpperBound(body as never, model);
    expect(bound).toBeGreaterThanOrEqual(rendered(body as never));
    expect(bound).toBeGreaterThanOrEqual(mockPromptTokens(body));
  });

  it('counts each image at the per-image bound, or at the whole context without one', () => {
    const one = { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] }] };
    const two = { messages: [{ role: 'user', content: [one.messages[0].content[0], one.messages[0].content[0]] }] };
    expect(inputTokensUpperBound(one, model)).toBe(8 + 8 + 6 + 8 + 25_600);
    expect(inputTokensUpperBound(two, model)).toBe(8 + 8 + 6 + 2 * (8 + 25_600));
    expect(MOCK_IMAGE_TOKENS).toBeLessThan(25_600);
    expect(inputTokensUpperBound(one, { context_length: 128_000, image_input_tokens: null })).toBe(128_000);
  });

  it('adds the tool framing once when tools are present, and never exceeds the context window', () => {
    const tools = [{ type: 'function', function: { name: 'f' } }];
    const withTools = inputTokensUpperBound({ messages: [{ role: 'user', content: 'a' }], tools }, model);
    const without = inputTokensUpperBound({ messages: [{ role: 'user', content: 'a' }] }, model);
    expect(withTools - without).toBe(JSON.stringify(tools).length + TOOLS_OVERHEAD + 16);
    expect(inputTokensUpperBound({ messages: [{ role: 'user', content: 'x'.repeat(4_000_000) }] }, model)).toBe(128_000);
    expect(inputTokensUpperBound({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AA', format: 'wav' } }] }] }, model)).toBe(
      128_000,
    );
  });
});

describe('a model whose context length was never given', () => {
  const unset = { context_length: 128_000, image_input_tokens: null, context_length_set: false };
  const set = { ...unset, context_length_set: true };
  const one = (part: Record<string, unknown>) => ({ messages: [{ role: 'user', content: [part] }] });
  // {"type":"file","file":{"file_data":"data:application/pdf;base64,<1 000 000 × A>"}}: 64 + 1 000 000 + 3 bytes of JSON
  const file = { type: 'file', file: { file_data: `data:application/pdf;base64,${'A'.repeat(1_000_000)}` } };
  // {"type":"input_audio","input_audio":{"data":"<600 000 × A>","format":"wav"}}: 45 + 600 000 + 18 bytes
  const audio = { type: 'input_audio', input_audio: { data: 'A'.repeat(600_000), format: 'wav' } };
  const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(300_000)}` } };

  it('holds an audio, file or unbounded image part at its JSON bytes when they exceed the default context', () => {
    // 8 per request, 8 per message, 6 for "user", then the part
    expect(JSON.stringify(file).length).toBe(1_000_067);
    expect(inputTokensUpperBound(one(file), unset)).toBe(8 + 8 + 6 + 1_000_067);
    expect(JSON.stringify(audio).length).toBe(600_063);
    expect(inputTokensUpperBound(one(audio), unset)).toBe(8 + 8 + 6 + 600_063);
    // {"type":"image_url","image_url":{"url":"data:image/png;base64,<300 000 × A>"}}: 62 + 300 000 + 3 bytes, and 8 per image
    expect(JSON.stringify(image).length).toBe(300_065);
    expect(inputTokensUpperBound(one(image), unset)).toBe(8 + 8 + 6 + 8 + 300_065);
    expect(inputTokensUpperBound({ messages: [{ role: 'user', content: [file, audio] }] }, unset)).toBe(8 + 8 + 6 + 1_000_067 + 600_063);
  });

  it('never holds a small part below the default context, and a model with a context keeps its cap', () => {
    const url = { type: 'image_url', image_url: { url: 'https://x/y.png' } };
    expect(inputTokensUpperBound(one(url), unset)).toBe(8 + 8 + 6 + 8 + 128_000);
    expect(inputTokensUpperBound(one({ type: 'input_audio', input_audio: { data: 'AA', format: 'wav' } }), unset)).toBe(8 + 8 + 6 + 128_000);
    expect(inputTokensUpperBound(one(file), set)).toBe(128_000);
    expect(inputTokensUpperBound(one(audio), set)).toBe(128_000);
    expect(inputTokensUpperBound(one(image), { ...unset, image_input_tokens: 1_600 })).toBe(8 + 8 + 6 + 8 + 1_600);
  });
});
