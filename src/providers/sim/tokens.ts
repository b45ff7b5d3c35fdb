// Token counting of the built-in `sim` vendor. Fixed and documented so clients and tests can
// predict every bill exactly:
//
//   token             = a maximal run of non-whitespace characters together with the whitespace
//                       before it (regex /\s*\S+/g). "Hello, world!" → ["Hello,", " world!"] = 2.
//   prompt_tokens     = 3 + Σ over messages (3 + tokens(text(message.content)))
//   completion_tokens = number of tokens emitted (one per delta frame)
//
// text(content): a string as is; an array of content parts → the `text` of its text parts joined
// with "\n"; anything else (null, tool-call-only messages) → "".
// Whitespace after the last token belongs to no token: the sim sends it with the last delta so
// that an echo is verbatim, and it counts nothing.

import { contentText } from '../shared/content.ts';

export { contentText };

const TOKEN = /\s*\S+/g;
export const TOKENS_PER_MESSAGE = 3;
export const TOKENS_PER_REQUEST = 3;

export function countTokens(text: string): number {
  let n = 0;
  TOKEN.lastIndex = 0;
  while (TOKEN.exec(text) !== null) n++;
  return n;
}

/** Splits text into tokens; trailing whitespace (if any) is appended to the last token. */
export function splitTokens(text: string): string[] {
  const tokens = text.match(TOKEN) ?? [];
  if (tokens.length > 0) {
    const consumed = tokens.reduce((n, t) => n + t.length, 0);
    if (consumed < text.length) tokens[tokens.length - 1] += text.slice(consumed);
  }
  return tokens;
}

export function promptTokens(messages: unknown): number {
  let n = TOKENS_PER_REQUEST;
  if (Array.isArray(messages)) {
    for (const m of messages) n += TOKENS_PER_MESSAGE + countTokens(contentText((m as { content?: unknown } | null)?.content));
  }
  return n;
}
