import { promptCap } from '../../billing/estimate.ts';
import type { ModelRecord } from '../../db/models.ts';
import { errors } from '../../errors.ts';

// /v1/embeddings `input` as OpenAI takes it: a string, an array of strings, an array of token
// ids (one input), or an array of token-id arrays; at most MAX_INPUTS inputs, no empty one.

/** The inputs of an embeddings body, one per vector: a string, or one input's token ids. */
export type EmbeddingInput = string | number[];

/** `input` as OpenAI takes it (a string, strings, token ids, arrays of token ids) → one entry per input. */
export function inputList(input: unknown): EmbeddingInput[] {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input) || input.length === 0) return [];
  if (typeof input[0] === 'number') return [input as number[]];
  return input as EmbeddingInput[];
}

export const MAX_INPUTS = 2048;
/**
 * Tokens a vendor may add to one input beyond its text or ids (start/end markers of BERT-style
 * models); OpenAI adds none.
 */
export const PER_INPUT = 8;

const invalid = (why: string, param = 'input') => errors.badRequest(`Invalid value for '${param}': ${why}`, param);

const isTokenId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function tokenIds(value: unknown[], param: string): number[] {
  if (value.length === 0) throw invalid('a token array must not be empty.', param);
  if (!value.every(isTokenId)) throw invalid('token ids must be non-negative integers.', param);
  return value as number[];
}

/** The inputs of a request, one per vector, or a 400 naming `input` (or the input at fault). */
export function readEmbeddingInput(input: unknown): EmbeddingInput[] {
  if (typeof input === 'string') {
    if (input.length === 0) throw invalid('must not be an empty string.');
    return [input];
  }
  if (!Array.isArray(input)) throw invalid('must be a string, an array of strings, an array of token ids or an array of token-id arrays.');
  if (input.length === 0) throw invalid('must not be an empty array.');
  // one input's token ids (as many as its context allows), or up to MAX_INPUTS inputs
  if (typeof input[0] === 'number') return [tokenIds(input, 'input')];
  if (input.length > MAX_INPUTS) throw invalid(`at most ${MAX_INPUTS} inputs per request, got ${input.length}.`);
  return input.map((item, i) => {
    const param = `input[${i}]`;
    if (typeof item === 'string') {
      if (item.length === 0) throw invalid('must not be an empty string.', param);
      return item;
    }
    if (Array.isArray(item)) return tokenIds(item, param);
    throw invalid('every input must be a string or an array of token ids, all of one kind.', param);
  });
}

/** A token-id input longer than the model's context: the 400 OpenAI answers (a text's length is the vendor's to refuse). */
export function overlongInput(inputs: EmbeddingInput[], model: Pick<ModelRecord, 'context_length'>): { param: string; message: string } | null {
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i];
    if (typeof input !== 'string' && input.length > model.context_length) {
      const param = inputs.length === 1 ? 'input' : `input[${i}]`;
      return {
        param,
        message: `This model's maximum context length is ${model.context_length} tokens, however you requested ${input.length} tokens in '${param}'. Please reduce your input.`,
      };
    }
  }
  return null;
}

/**
 * The most prompt tokens a vendor can bill for these inputs (sizes the hold): per input, the
 * UTF-8 bytes of a text (a byte-level tokenizer never makes more tokens than bytes) or the number
 * of token ids (one token each), plus PER_INPUT; each input at most the model's context (a vendor
 * refuses, and does not bill, a longer one), so the whole at most context × inputs.
 */
export function embeddingsInputBound(inputs: EmbeddingInput[], model: Pick<ModelRecord, 'context_length'> & { context_length_set?: boolean }): number {
  const cap = promptCap(model);
  let n = 0;
  for (const input of inputs) {
    const tokens = (typeof input === 'string' ? Buffer.byteLength(input, 'utf8') : input.length) + PER_INPUT;
    n += Math.min(tokens, cap);
  }
  return n;
}
