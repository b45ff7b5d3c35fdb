import { errors } from '../errors.ts';
import type { ParsedRequest } from './types.ts';

// Strings of a request that reach PostgreSQL (model names, the end user, ids looked up) are refused
// at the edge, with a 400 naming the field, when PostgreSQL cannot store them: text refuses NUL,
// and no identifier of ours has a control character. What is only relayed to a vendor (message
// text, tool arguments) may hold anything JSON can.

// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL and other control characters are what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;

/** `value`, unless it has a control character or is longer than `max`: then the 400 naming `param`. */
export function storableText(value: string, param: string, max = Number.POSITIVE_INFINITY): string {
  if (CONTROL.test(value)) throw errors.badRequest(`Invalid value for '${param}': control characters are not allowed.`, param);
  if (value.length > max) throw errors.badRequest(`Invalid value for '${param}': at most ${max} characters.`, param);
  return value;
}

function storableList(list: unknown[], param: string): void {
  for (let i = 0; i < list.length; i++) if (typeof list[i] === 'string') storableText(list[i] as string, `${param}[${i}]`, 256);
}

const PROVIDER_LISTS = ['order', 'only', 'ignore'] as const;

/**
 * The request's strings that reach PostgreSQL or a job's routing: the fallback models (`models`),
 * the model, the provider slugs, the end user, `previous_response_id`.
 */
export function checkStoredText(req: ParsedRequest, endUserParam: string): void {
  const { models, provider, previous_response_id } = req.body as { models?: unknown; provider?: unknown; previous_response_id?: unknown };
  if (Array.isArray(models)) storableList(models, 'models');
  storableText(req.model, 'model', 256);
  if (provider && typeof provider === 'object') {
    for (const list of PROVIDER_LISTS) {
      const slugs = (provider as Record<string, unknown>)[list];
      if (Array.isArray(slugs)) storableList(slugs, `provider.${list}`);
    }
  }
  if (req.endUser !== undefined) storableText(req.endUser, endUserParam, 256);
  if (typeof previous_response_id === 'string') storableText(previous_response_id, 'previous_response_id', 256);
}

/**
 * The path of the first string (or object key) in `value` that holds U+0000, which PostgreSQL's
 * jsonb cannot store; null when there is none. Paths as the error `param`s name them: `input[0].content`.
 */
export function nulPath(value: unknown, path: string): string | null {
  if (typeof value === 'string') return value.includes('\u0000') ? path : null;
  if (value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulPath(value[i], `${path}[${i}]`);
      if (found) return found;
    }
    return null;
  }
  for (const [k, v] of Object.entries(value)) {
    const at = path ? `${path}.${k}` : k;
    if (k.includes('\u0000')) return at;
    const found = nulPath(v, at);
    if (found) return found;
  }
  return null;
}

/** JSON text for a jsonb column: U+0000 (which jsonb refuses) becomes U+FFFD; anything else as JSON.stringify writes it. */
export function jsonbText(value: unknown): string {
  const text = JSON.stringify(value);
  if (!text.includes('\\u0000')) return text;
  return JSON.stringify(value, (_k, v) => (typeof v === 'string' && v.includes('\u0000') ? v.replaceAll('\u0000', '\ufffd') : v));
}
