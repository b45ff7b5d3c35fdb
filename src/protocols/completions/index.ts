import { inputTokensUpperBound, PER_REQUEST, promptCap } from '../../billing/estimate.ts';
import { speaksNatively } from '../../catalog/apis.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';
import { checkParams, type ParamRefusal } from '../../chat/params.ts';
import { parseOrRefuse } from '../request-body.ts';
import type { ParsedRequest, Protocol } from '../types.ts';
import { CompletionsEncoder } from './encoder.ts';
import { COMPLETIONS_PARAMS, type CompletionsRequest, CompletionsRequestSchema, DEFAULT_MAX_TOKENS, type Prompt, readPrompt } from './schema.ts';

// POST /v1/completions: OpenAI's legacy text completions, one prompt and one choice per request.
// Sent as they are to a vendor with native legacy completions (catalog legacy_completions, openai
// protocol); translated into a chat completion with one user message for every other model.

export interface CompletionsParsed extends ParsedRequest {
  completion: CompletionsRequest;
  prompt: Prompt;
}

/** Fields a translated request takes into its chat body (as chat completions name them). */
const TO_CHAT = ['stop', 'temperature', 'top_p', 'presence_penalty', 'frequency_penalty', 'seed', 'user', 'stream', 'stream_options', 'sim'];

const refuse = (param: string, message: string): ParamRefusal => ({ param, code: 'unsupported_parameter', message });

/** The chat-completions body a request becomes for a model without native legacy completions. */
export function chatBodyOf(req: CompletionsParsed, model: Pick<CatalogEntry, 'extra_params'>): Record<string, unknown> {
  const text = 'text' in req.prompt ? req.prompt.text : '';
  const body: Record<string, unknown> = { messages: [{ role: 'user', content: text }] };
  for (const k of [...TO_CHAT, ...model.extra_params]) if (req.body[k] != null) body[k] = req.body[k];
  body.max_tokens = req.completion.max_tokens ?? DEFAULT_MAX_TOKENS;
  return body;
}

function nativeBound(req: CompletionsParsed): number {
  const prompt = 'text' in req.prompt ? Buffer.byteLength(req.prompt.text, 'utf8') : req.prompt.tokens.length;
  return PER_REQUEST + prompt + Buffer.byteLength(req.completion.suffix ?? '', 'utf8');
}

export const completions: Protocol<CompletionsParsed> = {
  name: 'completions',
  path: '/v1/completions',
  kind: 'chat',
  parse(json) {
    const body = parseOrRefuse(CompletionsRequestSchema, json);
    const prompt = readPrompt(body.prompt);
    const { model, ...rest } = body;
    return { model, stream: body.stream === true, body: rest, completion: body, prompt, endUser: typeof body.user === 'string' ? body.user : undefined };
  },
  check(req, model) {
    const c = req.completion;
    for (const key in req.body) {
      if (!COMPLETIONS_PARAMS.has(key) && !model.extra_params.includes(key)) return refuse(key, `Unrecognized request argument supplied: ${key}`);
    }
    if (c.n != null && c.n !== 1) return refuse('n', 'Only n=1 is supported: this gateway relays one completion per request.');
    if (c.best_of != null && c.best_of !== 1) return refuse('best_of', 'Only best_of=1 is supported: the vendor bills every candidate it generates.');
    if (c.echo === true) return refuse('echo', 'echo is not supported: the vendor would bill the prompt again as output.');
    if (c.logprobs != null) return refuse('logprobs', 'logprobs are not relayed by this gateway.');
    if (speaksNatively(model, 'completions')) return null;
    if (c.suffix != null)
      return refuse('suffix', `suffix is only available on models with native legacy completions; "${model.id}" is served through chat completions.`);
    if ('tokens' in req.prompt) {
      return refuse(
        'prompt',
        `Token-id prompts are only available on models with native legacy completions; "${model.id}" is served through chat completions.`,
      );
    }
    return checkParams(chatBodyOf(req, model), model);
  },
  inputBound: (req, model) =>
    speaksNatively(model, 'completions')
      ? Math.min(nativeBound(req), promptCap(model))
      : inputTokensUpperBound(chatBodyOf(req, model) as { messages: unknown[] }, model),
  outputCap: (req) => ({ requested: req.completion.max_tokens ?? DEFAULT_MAX_TOKENS, param: 'max_tokens', clamp: false }),
  job: (req, model) => (speaksNatively(model, 'completions') ? { api: 'completions', body: req.body } : { api: 'chat', body: chatBodyOf(req, model) }),
  encoder: (ctx, req) => new CompletionsEncoder(ctx, req.completion.stream_options?.include_usage === true),
  errorBody: (e) => ({ body: e.toJSON() }),
};
