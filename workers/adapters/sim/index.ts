import { type Adapter, type AdapterEvent, type UpstreamCall, UpstreamError } from '../types.ts';
import { abortError, sleep } from '../shared/abort.ts';
import { simNaturalOutput, simOptions } from './generate.ts';
import { countTokens, promptTokens } from './tokens.ts';

export interface SimAdapterOptions {
  /** Default delay before the first token (SIM_FIRST_TOKEN_MS). */
  firstTokenMs: number;
  /** Default token rate (SIM_TOKENS_PER_SECOND); 0 = as fast as possible. */
  tokensPerSecond: number;
}

/** The built-in deterministic vendor: no network, exact documented token counts (see tokens.ts). */
export function createSimAdapter(defaults: SimAdapterOptions): Adapter {
  return {
    name: 'sim',
    async stream(call: UpstreamCall, signal: AbortSignal, emit: (ev: AdapterEvent) => void): Promise<void> {
      const { job } = call;
      // the simulated vendor has the prompt as soon as the job starts
      call.sent = call.accepted = true;
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
      // Exact: every delta is one token, and trailing whitespace counts nothing.
      return { usage: { prompt_tokens: promptTokens(job.body.messages), completion_tokens: countTokens(output) }, estimated: false };
    },
  };
}
