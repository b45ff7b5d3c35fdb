import { isUtf8 } from 'node:buffer';
import type { z } from 'zod';
import { MAX_JSON_DEPTH, scanJson } from '../chat/json-depth.ts';
import { errors } from '../errors.ts';

// Reading a request body, the same for every protocol: before JSON.parse, bytes it would silently
// replace (U+FFFD), nesting that overflows the stack of whatever walks the value later, numbers it
// would turn into Infinity; then a JSON object; then the protocol's zod schema.

export function parseJsonObject(raw: Buffer): Record<string, unknown> {
  if (!isUtf8(raw)) throw errors.invalidUtf8();
  const problem = scanJson(raw, MAX_JSON_DEPTH);
  if (problem?.kind === 'too_deep') throw errors.jsonTooDeep(MAX_JSON_DEPTH);
  if (problem?.kind === 'number_out_of_range') throw errors.numberOutOfRange(problem.literal);
  let json: unknown;
  try {
    json = JSON.parse(raw.toString('utf8'));
  } catch {
    throw errors.invalidJson();
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) throw errors.badRequest('Request body must be a JSON object.');
  return json as Record<string, unknown>;
}

/** First issue of a failed parse as (message, param) in OpenAI's style. */
export function describeIssue(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const param = issue.path.length
    ? issue.path
        .map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))
        .join('.')
        .replace(/\.\[/g, '[')
    : null;
  return { message: param ? `Invalid value for '${param}': ${issue.message}` : issue.message, param };
}

/** The body as `schema` reads it, or a 400 naming the first field it refuses. */
export function parseOrRefuse<T>(schema: z.ZodType<T>, json: unknown): T {
  const parsed = schema.safeParse(json);
  if (parsed.success) return parsed.data;
  const { message, param } = describeIssue(parsed.error);
  throw errors.badRequest(message, param);
}
