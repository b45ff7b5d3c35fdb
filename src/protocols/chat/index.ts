import { inputTokensUpperBound } from '../../billing/estimate.ts';
import { checkParams, wantsUsage } from '../../chat/params.ts';
import { parseOrRefuse } from '../request-body.ts';
import type { ParsedRequest, Protocol } from '../types.ts';
import { ChatEncoder } from './encoder.ts';
import { type ChatRequest, ChatRequestSchema } from './schema.ts';
import { routingOf } from './openrouter.ts';
import { reasoningEffort } from '../../chat/reasoning.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';

// POST /v1/chat/completions: OpenAI's chat completions, the API every adapter speaks.

export interface ChatParsed extends ParsedRequest {
  chat: ChatRequest;
}

export const chat: Protocol<ChatParsed> = {
  name: 'chat',
  path: '/v1/chat/completions',
  kind: 'chat',
  parse(json) {
    const body = parseOrRefuse(ChatRequestSchema, json);
    const { model: _model, ...rest } = body;
    return {
      ...routingOf(body),
      stream: body.stream === true,
      body: rest,
      chat: body,
      endUser: typeof body.user === 'string' ? body.user : undefined,
    };
  },
  check: (req, model) => checkParams(req.chat, model),
  inputBound: (req, model) => inputTokensUpperBound(req.chat, model),
  outputCap(req) {
    const { max_completion_tokens, max_tokens } = req.chat;
    return {
      requested: max_completion_tokens ?? max_tokens ?? null,
      param: max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
      clamp: false,
    };
  },
  job: (req, model) => ({ api: 'chat', body: withReasoningEffort(req, model) }),
  encoder: (ctx, req) => new ChatEncoder(ctx, wantsUsage(req.chat), req.chat.reasoning?.exclude === true),
  errorBody: (e) => ({ body: e.toJSON() }),
};

/**
 * OpenRouter's `reasoning` as OpenAI's reasoning_effort, for an OpenAI-compatible model the catalog
 * marks as reasoning (unless the client set reasoning_effort itself). The Anthropic adapter turns it
 * into a thinking budget; other models take no reasoning setting.
 */
function withReasoningEffort(req: ChatParsed, model: CatalogEntry): Record<string, unknown> {
  const r = req.chat.reasoning;
  if (!r || !model.reasoning || model.protocol !== 'openai' || req.body.reasoning_effort !== undefined) return req.body;
  const effort = reasoningEffort(r, req.chat.max_completion_tokens ?? req.chat.max_tokens ?? model.max_output_tokens);
  return effort ? { ...req.body, reasoning_effort: effort } : req.body;
}
