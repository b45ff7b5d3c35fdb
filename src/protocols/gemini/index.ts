import type { z } from 'zod';
import { inputTokensUpperBound } from '../../billing/estimate.ts';
import { speaksNatively } from '../../catalog/apis.ts';
import type { CatalogEntry } from '../../catalog/catalog.ts';
import { checkParams, type ParamRefusal } from '../../chat/params.ts';
import { type CatracaError, errors } from '../../errors.ts';
import { buildAnthropicBody } from '../../providers/anthropic/request.ts';
import { newCall } from '../../providers/types.ts';
import { Untranslatable } from '../messages/to-chat.ts';
import type { ParsedRequest, Protocol } from '../types.ts';
import { CountTokensEncoder, GeminiEncoder } from './encoder.ts';
import { CountTokensRequestSchema, describeGeminiIssue, type GenerateContentRequest, GenerateContentRequestSchema } from './schema.ts';
import { toChat } from './to-chat.ts';
import { googleErrorBody, googleStatus } from './wire.ts';

// The Gemini API inbound: POST /v1beta/models/{model}:generateContent, :streamGenerateContent
// (alt=sse) and :countTokens, the model named in the path (src/gateway/gemini-routes.ts). The
// request is translated into chat completions (to-chat.ts), the API every adapter speaks, and runs
// the one pipeline every route runs; the answer is written back in Gemini's shape (encoder.ts).

export interface GeminiParsed extends ParsedRequest {
  gemini: GenerateContentRequest;
  /** the chat translation, made once per model (check, inputBound and job all need it) */
  translated?: { model: string; body: Record<string, unknown> };
}

function parseGemini<T>(schema: z.ZodType<T>, json: unknown): T {
  const parsed = schema.safeParse(json);
  if (parsed.success) return parsed.data;
  const { message, param } = describeGeminiIssue(parsed.error);
  throw errors.badRequest(message, param);
}

function chatBody(req: GeminiParsed, model: CatalogEntry): Record<string, unknown> {
  if (req.translated?.model !== model.id) req.translated = { model: model.id, body: toChat(req.gemini, model, req.stream) };
  return req.translated.body;
}

function check(req: GeminiParsed, model: CatalogEntry): ParamRefusal | null {
  try {
    return checkParams(chatBody(req, model), model);
  } catch (err) {
    if (err instanceof Untranslatable) return err.refusal;
    throw err;
  }
}

const errorBody = (e: CatracaError) => ({ body: googleErrorBody(e), status: googleStatus(e).code });

/** The model named by the path; `stream` for :streamGenerateContent. The body names none. */
export interface GeminiTarget {
  model: string;
  stream: boolean;
}

export const generateContent: Protocol<GeminiParsed> = {
  name: 'gemini',
  path: '/v1beta/models/{model}:generateContent',
  kind: 'chat',
  parse(json) {
    const body = parseGemini(GenerateContentRequestSchema, json);
    return { model: '', stream: false, body: {}, gemini: body };
  },
  check,
  inputBound: (req, model) => inputTokensUpperBound(chatBody(req, model) as never, model),
  // Gemini CLI asks for no cap, or a large one: above the model's maximum it is lowered to it
  outputCap: (req) => ({ requested: req.gemini.generationConfig?.maxOutputTokens ?? null, param: 'generationConfig.maxOutputTokens', clamp: true }),
  job: (req, model) => ({ api: 'chat', body: chatBody(req, model) }),
  encoder: (ctx, req) => new GeminiEncoder(ctx, req.gemini.generationConfig?.thinkingConfig?.includeThoughts === true),
  errorBody,
};

/** countTokens takes `contents` alone or a whole `generateContentRequest`. */
function countRequest(json: Record<string, unknown>): GenerateContentRequest {
  const body = parseGemini(CountTokensRequestSchema, json);
  const inner = body.generateContentRequest ?? { contents: body.contents ?? [] };
  return parseGemini(GenerateContentRequestSchema, inner);
}

/** A count on a model whose vendor counts (Anthropic): the translation in the vendor's own shape. */
function anthropicCountBody(req: GeminiParsed, model: CatalogEntry): Record<string, unknown> {
  const job = { v: 1, request_id: '', tenant_id: '', key_id: '', model: { id: model.id }, body: chatBody(req, model), max_tokens: 1 } as never;
  const { messages, system, tools, tool_choice } = buildAnthropicBody(newCall(job, model)) as Record<string, unknown>;
  return Object.fromEntries(Object.entries({ messages, system, tools, tool_choice }).filter(([, v]) => v !== undefined));
}

export const countTokens: Protocol<GeminiParsed> = {
  name: 'gemini_count_tokens',
  path: '/v1beta/models/{model}:countTokens',
  kind: 'chat',
  free: true,
  parse(json) {
    return { model: '', stream: false, body: {}, gemini: countRequest(json) };
  },
  check,
  inputBound: () => 0,
  outputCap: () => ({ requested: null, param: 'generationConfig.maxOutputTokens', clamp: true }),
  // a model whose adapter has no count endpoint gets the chat translation: its worker counts it with the model's tokenizer
  job: (req, model) => ({
    api: 'count_tokens',
    body: speaksNatively(model, 'count_tokens') ? anthropicCountBody(req, model) : chatBody(req, model),
  }),
  encoder: () => new CountTokensEncoder(),
  errorBody,
};

/** The protocol of one request: the model and streaming from its path, set on what `parse` reads. */
export function forTarget(protocol: Protocol<GeminiParsed>, target: GeminiTarget): Protocol<GeminiParsed> {
  return { ...protocol, parse: (json) => ({ ...protocol.parse(json), model: target.model, stream: target.stream }) };
}

/** `/v1beta/models/{model}:{method}` → the model (slashes kept) and method; null when the path is not one. */
export function geminiPath(url: string): { model: string; method: string } | null {
  const m = /^\/v1beta\/models\/(.+):([A-Za-z]+)$/.exec(url);
  if (!m) return null;
  let model: string;
  try {
    model = decodeURIComponent(m[1]);
  } catch {
    return null;
  }
  // a name PostgreSQL cannot take (control characters) is no model's
  if (hasControl(model)) return null;
  return { model: model.replace(/^models\//, ''), method: m[2] };
}

/** Whether `s` has a control character (PostgreSQL refuses NUL in text; none belongs in a model name). */
function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** `/v1beta/models/{model}` → the model named (slashes kept), or null. */
export function geminiModelPath(url: string): string | null {
  let model: string;
  try {
    model = decodeURIComponent(url.slice('/v1beta/models/'.length));
  } catch {
    return null;
  }
  return hasControl(model) ? null : model.replace(/^models\//, '');
}
