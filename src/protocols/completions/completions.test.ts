import { describe, expect, it } from 'vitest';
import { inputTokensUpperBound, PER_REQUEST } from '../../billing/estimate.ts';
import { Collected } from '../collector.ts';
import { CompletionsEncoder } from './encoder.ts';
import { chatBodyOf, completions } from './index.ts';
import { readPrompt } from './schema.ts';

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    const err = e as { status: number; param: string | null; message: string };
    return { status: err.status, param: err.param, message: err.message };
  }
  throw new Error('not refused');
};

const base = { extra_params: [] as string[], input_modalities: ['text'], context_length: 1000, image_input_tokens: null, max_output_tokens: 100 };
const native = { ...base, id: 'v/legacy', protocol: 'openai', legacy_completions: true } as never;
const viaChat = { ...base, id: 'v/chat', protocol: 'openai', legacy_completions: false } as never;
const sim = { ...base, id: 'sim/echo', protocol: 'sim', legacy_completions: false } as never;

describe('legacy completions prompt', () => {
  it('takes exactly one prompt: a string, one string, token ids, one token-id array', () => {
    expect(readPrompt('hi')).toEqual({ text: 'hi' });
    expect(readPrompt('')).toEqual({ text: '' });
    expect(readPrompt(['hi'])).toEqual({ text: 'hi' });
    expect(readPrompt([1, 2])).toEqual({ tokens: [1, 2] });
    expect(readPrompt([[1, 2]])).toEqual({ tokens: [1, 2] });
  });

  it('refuses batch prompts, naming prompt and saying why', () => {
    expect(refusal(() => readPrompt(['a', 'b']))).toEqual({
      status: 400,
      param: 'prompt',
      message: "Invalid value for 'prompt': batch prompts are not relayed (OpenAI answers one choice per prompt); send one prompt per request.",
    });
    expect(refusal(() => readPrompt([[1], [2]]))).toMatchObject({ param: 'prompt' });
    expect(refusal(() => readPrompt(undefined))).toMatchObject({ param: 'prompt', message: "Invalid value for 'prompt': prompt is required." });
    expect(refusal(() => readPrompt([]))).toMatchObject({ param: 'prompt' });
    expect(refusal(() => readPrompt({}))).toMatchObject({ param: 'prompt' });
  });
});

describe('legacy completions request', () => {
  const parse = (body: Record<string, unknown>) => completions.parse({ model: 'm', prompt: 'Say hi', ...body });

  it('refuses echo, logprobs, n and best_of above 1, unknown fields', () => {
    const refused = (body: Record<string, unknown>, model = native) => completions.check(parse(body), model)?.param;
    expect(refused({ echo: true })).toBe('echo');
    expect(refused({ echo: false, logprobs: null, n: 1, best_of: 1 })).toBeUndefined();
    expect(refused({ logprobs: 0 })).toBe('logprobs');
    expect(refused({ n: 2 })).toBe('n');
    expect(refused({ best_of: 3 })).toBe('best_of');
    expect(refused({ logit_bias: { 1: 2 } })).toBe('logit_bias');
    expect(completions.check(parse({ n: 2 }), native)?.message).toBe('Only n=1 is supported: this gateway relays one completion per request.');
  });

  it('takes suffix and token prompts only where the vendor has native legacy completions', () => {
    expect(completions.check(parse({ suffix: ' end' }), native)).toBeNull();
    expect(completions.check(parse({ suffix: ' end' }), viaChat)).toMatchObject({ param: 'suffix', code: 'unsupported_parameter' });
    expect(completions.check(completions.parse({ model: 'm', prompt: [1, 2] }), native)).toBeNull();
    expect(completions.check(completions.parse({ model: 'm', prompt: [1, 2] }), sim)?.param).toBe('prompt');
  });

  it('is the vendor API where native, one user message of chat completions elsewhere', () => {
    const req = parse({
      max_tokens: 5,
      stop: ['\n'],
      temperature: 0.5,
      seed: 1,
      user: 'u',
      stream: true,
      stream_options: { include_usage: true },
      suffix: null,
    });
    expect(completions.job(req, native)).toEqual({
      api: 'completions',
      body: {
        prompt: 'Say hi',
        max_tokens: 5,
        stop: ['\n'],
        temperature: 0.5,
        seed: 1,
        user: 'u',
        stream: true,
        stream_options: { include_usage: true },
        suffix: null,
      },
    });
    expect(completions.job(req, viaChat)).toEqual({
      api: 'chat',
      body: {
        messages: [{ role: 'user', content: 'Say hi' }],
        stop: ['\n'],
        temperature: 0.5,
        seed: 1,
        user: 'u',
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 5,
      },
    });
    // OpenAI's default of 16 tokens
    expect(completions.outputCap(parse({}))).toEqual({ requested: 16, param: 'max_tokens', clamp: false });
    expect(chatBodyOf(parse({}), sim as never).max_tokens).toBe(16);
  });

  it('bounds the input: the prompt and suffix bytes where native, the chat bound of the translation elsewhere', () => {
    const req = parse({ suffix: 'olá' });
    expect(completions.inputBound(req, native)).toBe(PER_REQUEST + 6 + 4);
    expect(completions.inputBound(completions.parse({ model: 'm', prompt: [[1, 2, 3]] }), native)).toBe(PER_REQUEST + 3);
    const plain = parse({});
    expect(completions.inputBound(plain, viaChat)).toBe(inputTokensUpperBound(chatBodyOf(plain, viaChat as never) as never, viaChat));
    expect(completions.inputBound(completions.parse({ model: 'm', prompt: 'x'.repeat(5000) }), native)).toBe(1000);
  });
});

describe('legacy completions encoder', () => {
  const ctx = { requestId: 'gen-1', model: 'v/legacy', created: 1700000000, streaming: true };
  const end = { finishReason: 'length', usage: { prompt_tokens: 3, completion_tokens: 2 }, estimated: false, costMicros: 12n };

  it('streams text_completion chunks, the finish, the usage chunk and [DONE]', () => {
    const e = new CompletionsEncoder(ctx, true);
    expect(e.open()).toBe('');
    const head = '{"id":"gen-1","object":"text_completion","created":1700000000,"model":"v/legacy",';
    expect(Buffer.from(e.text(Buffer.from('"Hi"'))).toString()).toBe(
      `data: ${head}"choices":[{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}]}\n\n`,
    );
    expect(e.delta({ content: ' there' })).toBe(`data: ${head}"choices":[{"text":" there","index":0,"logprobs":null,"finish_reason":null}]}\n\n`);
    expect(e.delta({ reasoning: 'hmm' })).toBe('');
    expect(e.close(end)).toBe(
      `data: ${head}"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}]}\n\n` +
        `data: ${head}"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"cost":0.000012}}\n\n` +
        'data: [DONE]\n\n',
    );
    expect(new CompletionsEncoder(ctx, false).close(end)).not.toContain('usage');
  });

  it('answers a whole text_completion', () => {
    const out = new Collected();
    out.text('Hi');
    out.text(' there');
    expect(new CompletionsEncoder({ ...ctx, streaming: false }, false).body(out, end)).toEqual({
      id: 'gen-1',
      object: 'text_completion',
      created: 1700000000,
      model: 'v/legacy',
      choices: [{ text: 'Hi there', index: 0, logprobs: null, finish_reason: 'length' }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, cost: 0.000012 },
    });
  });
});
