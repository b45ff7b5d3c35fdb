import { describe, expect, it } from 'vitest';
import { costMicros } from '../../billing/money.ts';
import { holdRange, outputTokens } from '../../gateway/hold.ts';
import { embeddings } from './index.ts';
import { embeddingsInputBound, MAX_INPUTS, overlongInput, PER_INPUT, readEmbeddingInput } from './input.ts';

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    const err = e as { status: number; param: string | null; message: string };
    return { status: err.status, param: err.param, message: err.message };
  }
  throw new Error('not refused');
};

describe('embeddings input', () => {
  it('takes a string, strings, token ids and token-id arrays', () => {
    expect(readEmbeddingInput('hi')).toEqual(['hi']);
    expect(readEmbeddingInput(['a', 'b'])).toEqual(['a', 'b']);
    expect(readEmbeddingInput([5, 0, 9])).toEqual([[5, 0, 9]]);
    expect(readEmbeddingInput([[1, 2], [3]])).toEqual([[1, 2], [3]]);
    expect(readEmbeddingInput(Array(MAX_INPUTS).fill('x'))).toHaveLength(MAX_INPUTS);
  });

  it('refuses what OpenAI refuses, with a 400 naming input (or the input at fault)', () => {
    expect(refusal(() => readEmbeddingInput(''))).toEqual({ status: 400, param: 'input', message: "Invalid value for 'input': must not be an empty string." });
    expect(refusal(() => readEmbeddingInput(['a', '']))).toMatchObject({ status: 400, param: 'input[1]' });
    expect(refusal(() => readEmbeddingInput([]))).toMatchObject({ param: 'input', message: "Invalid value for 'input': must not be an empty array." });
    expect(refusal(() => readEmbeddingInput(Array(MAX_INPUTS + 1).fill('x')))).toMatchObject({
      param: 'input',
      message: "Invalid value for 'input': at most 2048 inputs per request, got 2049.",
    });
    expect(refusal(() => readEmbeddingInput([[1], []]))).toMatchObject({ param: 'input[1]' });
    expect(refusal(() => readEmbeddingInput([1, -2]))).toMatchObject({ param: 'input' });
    expect(refusal(() => readEmbeddingInput([1.5]))).toMatchObject({ param: 'input' });
    expect(refusal(() => readEmbeddingInput(['a', 3]))).toMatchObject({ param: 'input[1]' });
    expect(refusal(() => readEmbeddingInput({ text: 'a' }))).toMatchObject({ param: 'input' });
    expect(refusal(() => readEmbeddingInput(undefined))).toMatchObject({ param: 'input' });
  });

  it('refuses a token-id input longer than the context, naming it', () => {
    const model = { context_length: 4 };
    expect(overlongInput([[1, 2, 3, 4]], model)).toBeNull();
    expect(overlongInput(['a very long text that only the vendor can count'], model)).toBeNull();
    expect(overlongInput([[1, 2, 3, 4, 5]], model)).toMatchObject({ param: 'input' });
    expect(overlongInput([[1], [1, 2, 3, 4, 5]], model)?.param).toBe('input[1]');
  });
});

describe('embeddings hold', () => {
  it('bounds the input: UTF-8 bytes of each text or its token count, plus PER_INPUT, each capped at the context', () => {
    const model = { context_length: 100 };
    // "olá" is 4 bytes; "ab" 2; three token ids; a text of 500 bytes is capped at the context
    expect(embeddingsInputBound(['olá', 'ab'], model)).toBe(4 + PER_INPUT + 2 + PER_INPUT);
    expect(embeddingsInputBound([[7, 8, 9]], model)).toBe(3 + PER_INPUT);
    expect(embeddingsInputBound(['x'.repeat(500), 'y'], model)).toBe(100 + 1 + PER_INPUT);
    // never more than context × inputs
    expect(embeddingsInputBound(Array(10).fill('z'.repeat(1000)), model)).toBe(100 * 10);
  });

  it('holds the input alone: the output cap is 0 and the hold range is the cost of the bound', () => {
    const model = { context_length: 8192, max_output_tokens: 4096, extra_params: [], protocol: 'sim' as const, legacy_completions: false, id: 'sim/embed' };
    const req = embeddings.parse({ model: 'sim/embed', input: ['hello world', 'olá'] });
    const cap = embeddings.outputCap(req);
    expect(cap.requested).toBe(0);
    const { requested, wanted } = outputTokens(cap, model);
    expect([requested, wanted]).toEqual([0, 0]);
    const prices = { input: 100_000n, output: 9_000_000n };
    const input = embeddings.inputBound(req, model as never);
    expect(input).toBe(11 + PER_INPUT + 4 + PER_INPUT);
    expect(holdRange(input, requested, wanted, prices)).toEqual({ min: costMicros(input, 0, prices), max: costMicros(input, 0, prices) });
  });
});

describe('embeddings request', () => {
  const model = { id: 'v/e', protocol: 'openai', legacy_completions: false, extra_params: ['truncate'], context_length: 10 } as never;

  it('keeps the fields it forwards, null as not given; refuses unknown fields unless the catalog lists them', () => {
    const req = embeddings.parse({ model: 'v/e', input: 'x', encoding_format: null, dimensions: 64, user: 'u1' });
    expect(req.body).toEqual({ input: 'x', dimensions: 64, user: 'u1' });
    expect(req.endUser).toBe('u1');
    expect(req.stream).toBe(false);
    expect(embeddings.check(req, model)).toBeNull();
    expect(embeddings.check(embeddings.parse({ model: 'v/e', input: 'x', truncate: 'END' }), model)).toBeNull();
    expect(embeddings.check(embeddings.parse({ model: 'v/e', input: 'x', stream: true }), model)).toEqual({
      param: 'stream',
      code: 'unsupported_parameter',
      message: 'Unrecognized request argument supplied: stream',
    });
  });

  it('refuses a bad encoding_format or dimensions at parse, naming them', () => {
    expect(refusal(() => embeddings.parse({ model: 'v/e', input: 'x', encoding_format: 'int8' }))).toMatchObject({ status: 400, param: 'encoding_format' });
    expect(refusal(() => embeddings.parse({ model: 'v/e', input: 'x', dimensions: 0 }))).toMatchObject({
      param: 'dimensions',
      message: "Invalid value for 'dimensions': must be a positive integer",
    });
    expect(refusal(() => embeddings.parse({ model: 'v/e', input: 'x', dimensions: 1.5 }))).toMatchObject({ param: 'dimensions' });
  });

  it('refuses a model whose vendor protocol cannot embed (anthropic)', () => {
    const req = embeddings.parse({ model: 'a/e', input: 'x' });
    expect(embeddings.check(req, { id: 'a/e', protocol: 'anthropic', legacy_completions: false, extra_params: [], context_length: 10 } as never)).toMatchObject(
      {
        param: 'model',
        message: 'The model "a/e" cannot embed: its vendor protocol (anthropic) has no embeddings API.',
      },
    );
  });

  it('makes an embeddings job of the body as given', () => {
    const req = embeddings.parse({ model: 'v/e', input: [[1, 2]], encoding_format: 'base64' });
    expect(embeddings.job(req, model)).toEqual({ api: 'embeddings', body: { input: [[1, 2]], encoding_format: 'base64' } });
  });
});

describe('embeddings input of one long token array', () => {
  it('is one input, however many ids (the context, not the input count, limits it)', () => {
    expect(readEmbeddingInput(Array(MAX_INPUTS + 1).fill(1))).toEqual([Array(MAX_INPUTS + 1).fill(1)]);
  });
});
