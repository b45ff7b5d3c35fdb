import type { ModelRecord, Protocol } from '../db/models.ts';

// Which request fields reach a vendor. A client's body is never forwarded raw: the front door
// refuses what could change the vendor's price without us pricing it, and the worker builds the
// upstream body from these lists only (defense in depth, see upstreamParams).
//
// Every top-level field falls in exactly one class:
//   handled   the gateway and worker implement it themselves (model, messages, stream, max_tokens, …)
//   forward   a documented parameter of the protocol: sent to the vendor as given
//   drop      a parameter of another dialect (OpenRouter's routing fields, a sampling knob the
//             protocol lacks): accepted and not sent, as OpenRouter ignores what a provider lacks
//   refuse    changes what the vendor bills in ways our per-token prices do not cover, or asks
//             for output we do not relay: 400 naming the parameter
//   unknown   in no list: 400 "Unrecognized request argument supplied" (OpenAI's own answer),
//             unless the catalog lists it in the model's extra_params (then forwarded)

type Rule = 'handled' | 'forward' | 'drop' | ((value: unknown) => string | null);

/** A refusal: why, in OpenAI's error-message style. */
export interface ParamRefusal {
  param: string;
  message: string;
  code: 'unsupported_parameter' | 'unsupported_content';
}

const HANDLED = ['model', 'messages', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'n', 'sim'];

// OpenAI's documented chat-completions parameters that cost nothing beyond tokens.
const OPENAI_FORWARDED = [
  'temperature',
  'top_p',
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'seed',
  'stop',
  'response_format',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'reasoning_effort',
  'verbosity',
  'metadata',
  'store',
  'prompt_cache_key',
  'safety_identifier',
  'functions',
  'function_call',
];

// OpenRouter's own request fields and sampling knobs of other dialects. Routing is ours (the
// catalog entry is the route), so these are accepted and never sent on.
const OTHER_DIALECTS = [
  'models',
  'provider',
  'route',
  'transforms',
  'usage',
  'reasoning',
  'debug',
  'top_k',
  'top_a',
  'min_p',
  'repetition_penalty',
  'structured_outputs',
];

const refuseUnlessOneOf = (allowed: unknown[], why: string) => (v: unknown) => (v === null || v === undefined || allowed.includes(v) ? null : why);

// Parameters that raise the vendor's bill beyond prompt × input price + completion × output
// price (priority tiers, per-call tool fees, audio tokens at audio prices, rejected prediction
// tokens), or whose output we do not relay.
const PRICED: Record<string, (v: unknown) => string | null> = {
  service_tier: refuseUnlessOneOf(
    ['auto', 'default'],
    "Only service_tier 'auto' or 'default' is available through this gateway: other tiers are priced differently by the vendor.",
  ),
  plugins: (v) =>
    v === null || v === undefined || (Array.isArray(v) && v.length === 0)
      ? null
      : 'Plugins (web search, file parsing, …) are billed by the vendor per use and are not available through this gateway.',
  web_search_options: (v) => (v === null || v === undefined ? null : 'Web search is billed by the vendor per call and is not available through this gateway.'),
  modalities: (v) =>
    v === null || v === undefined || (Array.isArray(v) && v.every((m) => m === 'text')) ? null : 'Only text output is available through this gateway.',
  audio: (v) => (v === null || v === undefined ? null : 'Audio output is not available through this gateway.'),
  prediction: (v) =>
    v === null || v === undefined ? null : 'Predicted outputs are not available through this gateway (the vendor bills rejected prediction tokens).',
  logprobs: (v) => (v === true ? 'logprobs are not relayed by this gateway.' : null),
  top_logprobs: (v) => (typeof v === 'number' && v > 0 ? 'logprobs are not relayed by this gateway.' : null),
  prompt: () => 'Send the conversation as messages; the prompt field is not supported.',
};

function table(protocol: Protocol): Map<string, Rule> {
  const t = new Map<string, Rule>();
  for (const f of OTHER_DIALECTS) t.set(f, 'drop');
  for (const f of OPENAI_FORWARDED) t.set(f, 'drop');
  for (const [f, check] of Object.entries(PRICED)) t.set(f, check);
  for (const f of HANDLED) t.set(f, 'handled');
  if (protocol === 'openai' || protocol === 'azure') {
    // Azure OpenAI takes OpenAI's chat body on its own URL (src/providers/azure); it has no service tiers
    for (const f of OPENAI_FORWARDED) t.set(f, 'forward');
    const tier = PRICED.service_tier;
    if (protocol === 'openai') t.set('service_tier', (v) => tier(v)); // checked, then forwarded by upstreamParams
  }
  if (protocol === 'anthropic' || protocol === 'bedrock' || protocol === 'gemini') {
    // translated by the Anthropic adapter (src/providers/anthropic/request.ts), Bedrock's or Gemini's (src/providers/*/request.ts)
    const fields =
      protocol === 'anthropic'
        ? ['temperature', 'top_p', 'top_k', 'stop', 'tools', 'tool_choice', 'user']
        : ['temperature', 'top_p', 'stop', 'tools', 'tool_choice'];
    for (const f of fields) t.set(f, 'forward');
    t.set('response_format', (v) => {
      const type = (v as { type?: unknown } | null)?.type;
      return v === null || v === undefined || type === 'text' ? null : 'response_format is not supported for this model.';
    });
    t.set('functions', (v) => (v == null ? null : 'The legacy functions parameter is not supported for this model; use tools.'));
    t.set('function_call', (v) => (v == null ? null : 'The legacy function_call parameter is not supported for this model; use tool_choice.'));
  }
  return t;
}

const TABLES: Record<Protocol, Map<string, Rule>> = {
  sim: table('sim'),
  openai: table('openai'),
  anthropic: table('anthropic'),
  azure: table('azure'),
  bedrock: table('bedrock'),
  gemini: table('gemini'),
};

/** Every field with a rule for this protocol's models; any other is unknown (refused, unless the model's extra_params list it). */
export const knownParams = (protocol: Protocol): ReadonlySet<string> => new Set(TABLES[protocol].keys());

/** Content-part type → the modality the catalog must list for it. */
const PART_MODALITY: Record<string, 'text' | 'image' | 'audio' | 'file'> = { text: 'text', image_url: 'image', input_audio: 'audio', file: 'file' };

/** Message fields forwarded (OpenAI's documented message shape); others (cache_control, …) are dropped. */
export const MESSAGE_FIELDS = ['role', 'content', 'name', 'tool_calls', 'tool_call_id', 'function_call', 'refusal'];

/**
 * The refusal for a chat request on this model, or null when every field is one we can bill.
 * Runs on the hot path before admission: plain loops, no allocation on the happy path.
 */
export function checkParams(body: Record<string, unknown>, model: Pick<ModelRecord, 'protocol' | 'extra_params' | 'input_modalities'>): ParamRefusal | null {
  const rules = TABLES[model.protocol];
  for (const key in body) {
    const rule = rules.get(key);
    if (rule === undefined) {
      if (model.extra_params.includes(key)) continue;
      return { param: key, code: 'unsupported_parameter', message: `Unrecognized request argument supplied: ${key}` };
    }
    if (typeof rule === 'function') {
      const why = rule(body[key]);
      if (why) return { param: key, code: 'unsupported_parameter', message: why };
    }
  }
  const messages = body.messages as Array<{ content?: unknown }>;
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]?.content;
    if (!Array.isArray(content)) continue;
    for (let j = 0; j < content.length; j++) {
      const part = content[j] as { type?: unknown; file?: { file_id?: unknown } };
      const type = String(part?.type);
      const modality = PART_MODALITY[type];
      const where = `messages[${i}].content[${j}]`;
      if (!modality) return { param: where, code: 'unsupported_content', message: `Content parts of type "${type}" are not supported.` };
      if (!model.input_modalities.includes(modality)) {
        return { param: where, code: 'unsupported_content', message: `This model does not accept ${modality} input.` };
      }
      // the Anthropic adapter translates image parts into image blocks; other vendors' adapters take text only
      const takesParts = model.protocol === 'openai' || model.protocol === 'azure';
      if (modality !== 'text' && !takesParts && !(modality === 'image' && model.protocol === 'anthropic')) {
        return { param: where, code: 'unsupported_content', message: `Only text content parts can be sent to this model.` };
      }
      if (type === 'file' && part.file?.file_id != null) {
        return { param: where, code: 'unsupported_content', message: 'Files must be sent inline (file_data); file ids of the vendor are not available.' };
      }
    }
  }
  return null;
}

/** OpenRouter's `usage: {include: true}` asks for the usage chunk, as stream_options.include_usage does. */
export function wantsUsage(body: Record<string, unknown>): boolean {
  const so = body.stream_options as { include_usage?: unknown } | null | undefined;
  const or = body.usage as { include?: unknown } | null | undefined;
  return so?.include_usage === true || or?.include === true;
}

/**
 * The fields of `body` the vendor may see, for the worker's request transform: forwarded
 * parameters and the model's extra_params, nothing else (the caller adds model, messages,
 * stream and the token cap).
 */
export function upstreamParams(body: Record<string, unknown>, model: Pick<ModelRecord, 'protocol' | 'extra_params'>): Record<string, unknown> {
  const rules = TABLES[model.protocol];
  const out: Record<string, unknown> = {};
  for (const key in body) {
    const rule = rules.get(key);
    const value = body[key];
    if (value === undefined) continue;
    if (rule === 'forward' || ((rule === undefined || rule === 'drop') && model.extra_params.includes(key))) out[key] = value;
    else if (key === 'service_tier' && model.protocol === 'openai' && value !== null) out[key] = value;
  }
  return out;
}

/** A message as the vendor may see it: documented fields only. */
export function upstreamMessage(m: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of MESSAGE_FIELDS) if (m[f] !== undefined) out[f] = f === 'content' && Array.isArray(m.content) ? m.content.map(upstreamPart) : m[f];
  return out;
}

function upstreamPart(p: unknown): unknown {
  const part = p as Record<string, unknown>;
  switch (part?.type) {
    case 'text':
      return { type: 'text', text: part.text };
    case 'image_url':
      return { type: 'image_url', image_url: part.image_url };
    case 'input_audio':
      return { type: 'input_audio', input_audio: part.input_audio };
    case 'file':
      return { type: 'file', file: part.file };
    default:
      return part;
  }
}
