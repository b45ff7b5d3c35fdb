import { brlNumber } from '../../billing/money.ts';
import { errors } from '../../errors.ts';
import type { Collected } from '../collector.ts';
import type { EncoderContext, Ending, ResponseEncoder } from '../types.ts';

// The /v1/embeddings answer: the body the worker's adapter built (OpenAI's shape, vectors as the
// vendor sent them), with the billed usage (and its cost in BRL, as chat reports it). Never streamed.

export class EmbeddingsEncoder implements ResponseEncoder {
  constructor(private readonly ctx: EncoderContext) {}

  open = () => '';
  text = () => '';
  delta = () => '';
  keepalive = () => '';
  close = () => '';
  fail = () => '';

  body(out: Collected, end: Ending) {
    let answer: { object?: unknown; data?: unknown } | null = null;
    try {
      answer = JSON.parse(out.wholeBody);
    } catch {
      /* answered below */
    }
    if (answer?.object !== 'list' || !Array.isArray(answer.data)) {
      throw errors.upstream(502, 'invalid_body', 'The worker sent an unreadable embeddings answer.');
    }
    const usage: Record<string, unknown> = {
      prompt_tokens: end.usage.prompt_tokens,
      total_tokens: end.usage.prompt_tokens + end.usage.completion_tokens,
      cost: brlNumber(end.costMicros),
    };
    if (end.estimated) usage.estimated = true;
    return { ...answer, model: this.ctx.model, usage };
  }
}
