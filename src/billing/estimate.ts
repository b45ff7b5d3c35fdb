import type { ModelRecord } from '../db/models.ts';

// Upper bound of the prompt tokens a vendor can bill for a chat request, used to size the hold.
// It must never be below what the vendor reports, for any input the vendor bills:
//
//   text        UTF-8 bytes. Byte-level BPE tokenizers (OpenAI's, Llama's, Anthropic's, the sim's
//               word count) never emit more tokens than bytes.
//   any field   that can reach the prompt (message names, tool calls, tool results, `tools`,
//               legacy `functions`, `response_format` schemas, `tool_choice`, `stop`): the bytes of
//               its JSON, which are more than the vendor's rendering of it, plus framing
//               allowances per message, per tool and once when tools are present (Anthropic adds a
//               ~350-token tool-use system prompt).
//   image       the catalog's per-model bound (`image_input_tokens`: e.g. 25 501 for gpt-4o-mini at
//               high detail, 1 600 for Claude), else as audio and files (unboundedPart).
//   audio, file the whole context window (vendors tokenize them in ways we cannot bound from bytes).
//               A model whose context length was never given: the default context (128 000) or the
//               part's JSON bytes, whichever is more: the default is no bound on such a model, and a
//               part's bytes alone are none either (an image by URL is a few bytes, a 2 × 2-tile one
//               25 501 tokens).
//   total       never more than the model's context window when the operator gave it: a vendor
//               refuses (and does not bill) a prompt longer than its context. A model whose context
//               length was never given is not capped (see promptCap).
// Fields the worker does not forward (see src/chat/params.ts) count nothing; the image data in a
// data: URL counts nothing (its cost is the image bound).
export const PER_MESSAGE = 8;
export const PER_REQUEST = 8;
export const PER_TOOL = 16;
export const TOOLS_OVERHEAD = 1024;

/** Fields besides messages whose content a vendor renders into the prompt. */
const PROMPT_FIELDS = ['tools', 'functions', 'response_format', 'tool_choice', 'function_call', 'stop'] as const;

type BoundModel = Pick<ModelRecord, 'context_length' | 'image_input_tokens'> & { context_length_set?: boolean };

/**
 * The most prompt tokens a vendor can bill for this model: its context length when the operator
 * gave it (a vendor refuses, and does not bill, a longer prompt), else no cap: the catalog's
 * default of 128 000 is not a bound on what a larger model bills.
 */
export function promptCap(model: Pick<ModelRecord, 'context_length'> & { context_length_set?: boolean }): number {
  return model.context_length_set === false ? Number.POSITIVE_INFINITY : model.context_length;
}

function jsonBytes(value: unknown): number {
  if (value === undefined || value === null) return 0;
  if (typeof value === 'string') return Buffer.byteLength(value, 'utf8') + 2;
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}

/**
 * The bound of one part a vendor tokenizes its own way (an image without a per-image bound, audio,
 * a file or document): the context window when the operator gave it; else the default context or
 * the part's JSON bytes, whichever is more (never capped below what the part can carry).
 */
export function unboundedPart(part: unknown, model: Pick<ModelRecord, 'context_length'> & { context_length_set?: boolean }): number {
  return model.context_length_set === false ? Math.max(model.context_length, jsonBytes(part)) : model.context_length;
}

function contentBound(content: unknown, model: BoundModel): number {
  if (typeof content === 'string') return Buffer.byteLength(content, 'utf8');
  if (!Array.isArray(content)) return jsonBytes(content);
  let n = 0;
  for (const p of content as Array<Record<string, unknown>>) {
    switch (p?.type) {
      case 'text':
        n += PER_MESSAGE + jsonBytes(p.text);
        break;
      case 'image_url':
        n += PER_MESSAGE + (model.image_input_tokens ?? unboundedPart(p, model));
        break;
      default: // audio, files, anything a vendor tokenizes its own way
        n += unboundedPart(p, model);
    }
  }
  return n;
}

export function inputTokensUpperBound(body: { messages: unknown[] } & Record<string, unknown>, model: BoundModel): number {
  const cap = promptCap(model);
  let n = PER_REQUEST;
  for (const raw of body.messages) {
    const m = (raw ?? {}) as Record<string, unknown>;
    n += PER_MESSAGE;
    for (const key in m) n += key === 'content' ? contentBound(m.content, model) : jsonBytes(m[key]);
    if (n >= cap) return cap;
  }
  for (const f of PROMPT_FIELDS) n += jsonBytes(body[f]);
  const tools = (Array.isArray(body.tools) ? body.tools.length : 0) + (Array.isArray(body.functions) ? body.functions.length : 0);
  if (tools > 0) n += TOOLS_OVERHEAD + PER_TOOL * tools;
  return Math.min(n, cap);
}
