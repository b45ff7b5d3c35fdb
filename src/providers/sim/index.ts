import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { abortError, sleep } from '../shared/abort.ts';
import { inputList } from '../../protocols/embeddings/input.ts';
import { embeddingsBody, encodeVector } from '../shared/embeddings.ts';
import { embeddingTokens, SIM_EMBEDDING_DIMENSIONS, SIM_MAX_DIMENSIONS, simEmbedding } from './embed.ts';
import { simNaturalOutput, simOptions } from './generate.ts';
import { countTokens, promptTokens } from './tokens.ts';

export interface SimAdapterOptions {
  /** Default delay before the first token (SIM_FIRST_TOKEN_MS). */
  firstTokenMs: number;
  /** Default token rate (SIM_TOKENS_PER_SECOND); 0 = as fast as possible. */
  tokensPerSecond: number;
}

/** A token count (/v1/messages/count_tokens, translated to chat by the front door): the prompt as the sim bills it. */
function countPrompt({ job }: UpstreamCall, emit: (ev: AdapterEvent) => void): void {
  const n = promptTokens(job.body.messages);
  emit({ type: 'body', json: JSON.stringify({ input_tokens: n }) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: n, completion_tokens: 0 });
}

/** The built-in deterministic vendor: no network, exact documented token counts (see tokens.ts). */
export function createSimAdapter(defaults: SimAdapterOptions): Adapter {
  return {
    name: 'sim',
    async stream(call: UpstreamCall, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void> {
      const { job } = call;
      if (job.api === 'embeddings') return simEmbeddings(call, defaults.firstTokenMs, signal, emit);
      // the simulated vendor has the prompt as soon as the job starts
      call.sent = call.accepted = true;
      if (job.api === 'count_tokens') return countPrompt(call, emit);
      const opts = simOptions(job.body);
      const firstTokenMs = opts.first_token_ms ?? defaults.firstTokenMs;
      const tps = opts.tokens_per_second ?? defaults.tokensPerSecond;
      const interval = tps > 0 ? 1000 / tps : 0;
      const natural = simNaturalOutput(job, call.model.upstream_model, opts);
      const cut = natural.length > job.max_tokens;
      const tokens = cut ? natural.slice(0, job.max_tokens) : natural;
      const prompt = promptTokens(job.body.messages);

      await sleep(firstTokenMs, signal);
      const start = Date.now();
      for (let i = 0; i < tokens.length; i++) {
        if (opts.fail_after_tokens !== undefined && i >= opts.fail_after_tokens) {
          throw new UpstreamError(502, 'upstream_stream_interrupted', `The sim vendor failed after ${i} tokens (fail_after_tokens).`);
        }
        if (signal.aborted) throw abortError(signal);
        // Paced against the start time so timer drift does not accumulate.
        if (interval > 0 && i > 0) await sleep(start + i * interval - Date.now(), signal);
        emit({ type: 'delta', content: tokens[i] });
      }
      if (opts.fail_after_tokens !== undefined) {
        throw new UpstreamError(502, 'upstream_stream_interrupted', `The sim vendor failed after ${tokens.length} tokens.`);
      }
      emit({ type: 'finish', reason: cut ? 'length' : 'stop' });
      emit({ type: 'usage', prompt_tokens: prompt, completion_tokens: tokens.length });
    },
    async countUsage({ job }, output) {
      if (job.api === 'embeddings') return { usage: { prompt_tokens: embeddingsPromptTokens(job.body), completion_tokens: 0 }, estimated: false };
      // Exact: every delta is one token, and trailing whitespace counts nothing.
      return { usage: { prompt_tokens: promptTokens(job.body.messages), completion_tokens: countTokens(output) }, estimated: false };
    },
  };
}

const embeddingsPromptTokens = (body: Record<string, unknown>) => inputList(body.input).reduce((n, input) => n + embeddingTokens(input), 0);

/**
 * The sim's /embeddings: one deterministic vector per input (embed.ts), `dimensions` honoured (at
 * most SIM_MAX_DIMENSIONS), an input longer than the model's context refused as vendors refuse it
 * (400, nothing billed); one body event and its usage.
 */
async function simEmbeddings(call: UpstreamCall, firstTokenMs: number, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void> {
  const { job, model } = call;
  const inputs = inputList(job.body.input);
  const dims = typeof job.body.dimensions === 'number' ? job.body.dimensions : SIM_EMBEDDING_DIMENSIONS;
  if (dims > SIM_MAX_DIMENSIONS) throw new UpstreamError(400, 'upstream_bad_request', `This model supports at most ${SIM_MAX_DIMENSIONS} dimensions.`);
  for (let i = 0; i < inputs.length; i++) {
    const n = embeddingTokens(inputs[i]);
    if (n > model.context_length) {
      throw new UpstreamError(
        400,
        'upstream_bad_request',
        `Input ${i} is ${n} tokens long; this model's maximum context length is ${model.context_length} tokens.`,
      );
    }
  }
  call.sent = call.accepted = true;
  await sleep(firstTokenMs, signal);
  const format = job.body.encoding_format === 'base64' ? 'base64' : 'float';
  const vectors = inputs.map((input) => encodeVector(Array.from(simEmbedding(model.upstream_model, input, dims)), format) as number[] | string);
  const prompt = embeddingsPromptTokens(job.body);
  emit({ type: 'body', json: embeddingsBody(model.id, vectors, prompt) });
  emit({ type: 'finish', reason: 'stop' });
  emit({ type: 'usage', prompt_tokens: prompt, completion_tokens: 0 });
}
