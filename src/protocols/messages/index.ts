import type { z } from 'zod';
import { inputTokensUpperBound } from '../../billing/estimate.ts';
import type { JobApi } from '../../bus/messages.ts';
import { speaksNatively } from '../../catalog/apis.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';
import { checkParams, type ParamRefusal } from '../../chat/params.ts';
import { type CatracaError, errors } from '../../errors.ts';
import type { Collected } from '../collector.ts';
import { storableText } from '../stored-text.ts';
import type { ParsedRequest, Protocol, ResponseEncoder } from '../types.ts';
import { anthropicInputBound } from './bound.ts';
import { MessagesEncoder } from './encoder.ts';
import { COUNT_FORWARDED, checkBlocks, checkTopLevel, checkVersion, FORWARDED, forwardedBetas, vendorFields, vendorMessages } from './policy.ts';
import { type AnthropicBody, CountTokensRequestSchema, describeAnthropicIssue, MessagesRequestSchema } from './schema.ts';
import { toChat, Untranslatable } from './to-chat.ts';
import { anthropicError, errorObject } from './wire.ts';

// POST /v1/messages (Anthropic's Messages API) and POST /v1/messages/count_tokens. To a model
// whose adapter speaks Messages (Anthropic's protocol) the request goes as Anthropic's, through
// the allowlists of policy.ts; to any other it is translated into chat completions (to-chat.ts)
// and the answer translated back by the encoder.

export interface MessagesParsed extends ParsedRequest {
  anthropic: AnthropicBody;
  /** max_tokens as the client sent it (absent on a token count) */
  maxTokens?: number;
  /** anthropic-beta values forwarded to an Anthropic vendor (policy.ts) */
  betas: string[];
  /** the chat translation, made once per model (check, inputBound and job all need it) */
  translated?: { model: string; body: Record<string, unknown> };
}

/** The body as `schema` reads it, or a 400 worded as Anthropic words it (`max_tokens: Field required`). */
function parseAnthropic<T>(schema: z.ZodType<T>, json: unknown): T {
  const parsed = schema.safeParse(json);
  if (parsed.success) return parsed.data;
  const { message, param } = describeAnthropicIssue(parsed.error);
  throw errors.badRequest(message, param);
}

const native = (model: CatalogEntry, api: JobApi) => speaksNatively(model, api);

/** The request translated into chat completions for `model` (cached on the request). */
function chatBody(req: MessagesParsed, model: CatalogEntry): Record<string, unknown> {
  if (req.translated?.model !== model.id)
    req.translated = { model: model.id, body: toChat(req.anthropic, model, { maxTokens: req.maxTokens, stream: req.stream }) };
  return req.translated.body;
}

/** What this model cannot take or we cannot bill: Anthropic's rules first, then the chat policy on the translation. */
function check(req: MessagesParsed, model: CatalogEntry, api: JobApi): ParamRefusal | null {
  const refused = checkTopLevel(req.anthropic) ?? checkBlocks(req.anthropic, model);
  if (refused || native(model, api)) return refused;
  try {
    return checkParams(chatBody(req, model), model);
  } catch (err) {
    if (err instanceof Untranslatable) return err.refusal;
    throw err;
  }
}

/** The body an Anthropic vendor gets: messages and the forwarded fields in Anthropic's shape, and the betas for the worker's header. */
function vendorBody(req: MessagesParsed, fields: readonly string[]): Record<string, unknown> {
  const body: Record<string, unknown> = { messages: vendorMessages(req.anthropic.messages), ...vendorFields(req.anthropic, fields) };
  if (req.betas.length) body.anthropic_beta = req.betas;
  return body;
}

const errorBody = (e: CatracaError) => ({ body: errorObject(e), status: anthropicError(e).status });

/** anthropic-version checked, anthropic-beta read: the protocol that parses this request with its betas. */
function withHeaders<P extends Protocol<MessagesParsed>>(protocol: P, header: (name: string) => string): P {
  const refused = checkVersion(header('anthropic-version'));
  if (refused) throw refused;
  const betas = forwardedBetas(header('anthropic-beta'));
  if (!betas.length) return protocol;
  return { ...protocol, parse: (json: Record<string, unknown>) => ({ ...protocol.parse(json), betas }) };
}

export const messages: Protocol<MessagesParsed> = {
  name: 'messages',
  path: '/v1/messages',
  kind: 'chat',
  endUserParam: 'metadata.user_id',
  parse(json) {
    const body = parseAnthropic(MessagesRequestSchema, json);
    const { model, ...rest } = body;
    const user = body.metadata?.user_id;
    return {
      model,
      stream: body.stream === true,
      body: rest,
      anthropic: body as AnthropicBody,
      maxTokens: body.max_tokens,
      betas: [],
      endUser: typeof user === 'string' && user ? user : undefined,
    };
  },
  check: (req, model) => check(req, model, 'messages'),
  inputBound: (req, model) =>
    native(model, 'messages') ? anthropicInputBound(req.anthropic, model) : inputTokensUpperBound(chatBody(req, model) as never, model),
  // Anthropic's clients send large caps (Claude Code: 32 000): above the model's maximum it is lowered to it
  outputCap: (req) => ({ requested: req.maxTokens ?? null, param: 'max_tokens', clamp: true }),
  job: (req, model) => (native(model, 'messages') ? { api: 'messages', body: vendorBody(req, FORWARDED) } : { api: 'chat', body: chatBody(req, model) }),
  encoder: (ctx) => new MessagesEncoder(ctx),
  responseHeaders: (requestId) => ({ 'request-id': requestId }),
  errorBody,
  withHeaders(header) {
    return withHeaders(this as Protocol<MessagesParsed>, header);
  },
};

/** A token count's answer: the vendor's (or our own) `{"input_tokens": N}`, as it came. */
class CountEncoder implements ResponseEncoder {
  open = () => '';
  text = () => '';
  delta = () => '';
  keepalive = () => '';
  close = () => '';
  fail = () => '';
  body(out: Collected) {
    return JSON.parse(out.wholeBody) as unknown;
  }
}

export const countTokens: Protocol<MessagesParsed> = {
  name: 'count_tokens',
  path: '/v1/messages/count_tokens',
  kind: 'chat',
  free: true,
  parse(json) {
    const body = parseAnthropic(CountTokensRequestSchema, json);
    const { model, ...rest } = body;
    // the same body as /v1/messages, the same refusals: an end user that could not be stored there is a 400 here too
    const user = (body.metadata as { user_id?: unknown } | undefined)?.user_id;
    if (typeof user === 'string') storableText(user, 'metadata.user_id', 256);
    return { model, stream: false, body: rest, anthropic: body as AnthropicBody, betas: [] };
  },
  check: (req, model) => check(req, model, 'count_tokens'),
  inputBound: () => 0,
  outputCap: () => ({ requested: null, param: 'max_tokens', clamp: true }),
  // a model whose adapter has no count endpoint gets the chat translation: its worker counts it with the model's tokenizer
  job: (req, model) => ({ api: 'count_tokens', body: native(model, 'count_tokens') ? vendorBody(req, COUNT_FORWARDED) : chatBody(req, model) }),
  encoder: () => new CountEncoder(),
  responseHeaders: (requestId) => ({ 'request-id': requestId }),
  errorBody,
  withHeaders(header) {
    return withHeaders(this as Protocol<MessagesParsed>, header);
  },
};
